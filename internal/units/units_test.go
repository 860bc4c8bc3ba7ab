package units

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
)

const jobID = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"

func validJob(t *testing.T, expr, tz string) Job {
	t.Helper()
	s, err := schedule.Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return Job{
		Tenant: "acme-shop", ID: jobID, User: "acme", Group: "acme",
		Webroot: "/srv/shared/www/acme-shop/public", LockDir: "/srv/shared/www/acme-shop/.locks",
		OnCalendar: s.OnCalendar(), TimeoutSec: 300, MemoryMaxMB: 256,
		RandomizedDelaySec: DelayFor(s.MinInterval()),
	}
}

// testPaths points ExecStart/ExecStopPost at real executables so that
// systemd-analyze verify can check them.
func testPaths(t *testing.T) Paths {
	dir := t.TempDir()
	for _, n := range []string{"cron-run", "cron-outcome"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return Paths{RunnerPath: dir + "/cron-run", OutcomePath: dir + "/cron-outcome", SpecDir: "/var/lib/hostcron/jobs"}
}

func TestRenderContainsDirectives(t *testing.T) {
	r, err := Render(validJob(t, "30 4 1,15 * 5", "Europe/Berlin"), DefaultPaths)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "cron-acme-shop-"+jobID {
		t.Errorf("Name = %q", r.Name)
	}
	for _, want := range []string{
		"OnCalendar=Fri *-*-* 04:30:00 Europe/Berlin\n", "OnCalendar=*-*-01,15 04:30:00 Europe/Berlin\n",
		"RandomizedDelaySec=15\n", "AccuracySec=1s\n", "Persistent=no\n", "FixedRandomDelay=yes\n",
		"Unit=" + r.Name + ".service\n", "WantedBy=timers.target\n",
	} {
		if !bytes.Contains(r.Timer, []byte(want)) {
			t.Errorf("timer lacks %q:\n%s", want, r.Timer)
		}
	}
	for _, want := range []string{
		"Type=oneshot\n", "User=acme\n", "Group=acme\n", "WorkingDirectory=/srv/shared/www/acme-shop/public\n",
		"NoNewPrivileges=yes\n", "ProtectSystem=strict\n", "ProtectHome=yes\n", "PrivateTmp=yes\n",
		"CPUQuota=100%\n", "MemoryMax=256M\n", "TimeoutStartSec=300s\n",
		"ReadWritePaths=/srv/shared/www/acme-shop/public -/srv/shared/www/acme-shop/.locks\n",
		"SyslogIdentifier=" + r.Name + "\n", "SuccessExitStatus=75\n",
		"ExecStopPost=+/usr/local/bin/cron-outcome\n", "ExecStart=/usr/local/bin/cron-run\n",
		"LoadCredential=spec:/var/lib/hostcron/jobs/" + r.Name + ".json\n",
		"LogExtraFields=HOSTCRON_TENANT=acme-shop\n", "LogExtraFields=HOSTCRON_CRON_JOB_ID=" + jobID + "\n",
		// The sandbox (docs/semantics.md, "Hardening of tenant units").
		"ProtectProc=invisible\n", "PrivateMounts=yes\n", "PrivateDevices=yes\n", "ProtectKernelTunables=yes\n",
		"ProtectKernelModules=yes\n", "ProtectKernelLogs=yes\n", "ProtectControlGroups=yes\n",
		"ProtectClock=yes\n", "ProtectHostname=yes\n", "RestrictNamespaces=yes\n", "RestrictSUIDSGID=yes\n",
		"LockPersonality=yes\n", "RestrictRealtime=yes\n", "CapabilityBoundingSet=\n", "AmbientCapabilities=\n",
		"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n", "KeyringMode=private\n",
		"SystemCallArchitectures=native\n", "SystemCallFilter=@system-service\n", "SystemCallErrorNumber=EPERM\n",
	} {
		if !bytes.Contains(r.Service, []byte(want)) {
			t.Errorf("service lacks %q:\n%s", want, r.Service)
		}
	}
	// Left out on purpose: they break tenants' tools (see the docs).
	for _, absent := range []string{"\nMemoryDenyWriteExecute=", "\nProcSubset=", "\nUMask=", "\nPrivateUsers=", "\nIPAddressDeny="} {
		if bytes.Contains(r.Service, []byte(absent)) {
			t.Errorf("service has %q:\n%s", absent, r.Service)
		}
	}
}

func TestRenderDenyAddresses(t *testing.T) {
	j := validJob(t, "* * * * *", "")
	j.DenyAddresses = []string{"10.20.0.5", "10.30.0.0/16", "fd00:1::/64"}
	r, err := Render(j, DefaultPaths)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nIPAddressDeny=10.20.0.5 10.30.0.0/16 fd00:1::/64\nReadWritePaths="; !bytes.Contains(r.Service, []byte(want)) {
		t.Errorf("service lacks %q:\n%s", want, r.Service)
	}
}

func TestParseDenyAddress(t *testing.T) {
	good := map[string]string{
		"10.0.0.5": "10.0.0.5", "10.0.0.5/32": "10.0.0.5", "10.1.2.3/16": "10.1.0.0/16",
		"::ffff:10.0.0.5": "10.0.0.5", "FD00::1": "fd00::1", "fd00::/8": "fd00::/8", "192.168.0.0/24": "192.168.0.0/24",
	}
	for in, want := range good {
		if got, err := ParseDenyAddress(in); err != nil || got != want {
			t.Errorf("ParseDenyAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		"", "any", "localhost", "link-local", "multicast", "example.com", "10.0.0.5 10.0.0.6", "10.0.0.5\nExecStartPre=/bin/sh",
		"fe80::1%eth0", "fe80::1%n", "10.0.0.0/33", "10.0.0.0/", "0.0.0.0/0", "::/0", "127.0.0.1", "127.0.0.0/8",
		"64.0.0.0/2", "0.0.0.0/1", "::1", "::/127", "::ffff:127.0.0.1", "::ffff:10.0.0.0/104", "10.0.0.5/8/8",
	}
	for _, in := range bad {
		if got, err := ParseDenyAddress(in); err == nil {
			t.Errorf("ParseDenyAddress(%q) = %q, want an error", in, got)
		}
	}
	// The unit takes only canonical entries: what it says is what was
	// checked.
	j := validJob(t, "* * * * *", "")
	for _, in := range append(bad, "10.1.2.3/16", "10.0.0.5/32") {
		j.DenyAddresses = []string{"10.0.0.1", in}
		if _, err := Render(j, DefaultPaths); err == nil {
			t.Errorf("DenyAddresses %q rendered without error", j.DenyAddresses)
		}
	}
}

// MaxExposure is the highest overall exposure systemd-analyze security may
// give a rendered service. Before the sandbox of docs/semantics.md
// ("Hardening of tenant units") it was 8.5; with it, 1.5 (systemd 252).
const MaxExposure = 5.0

var exposureRE = regexp.MustCompile(`Overall exposure level for \S+: ([0-9]+\.[0-9]+)`)

// TestServiceExposure measures the rendered service with systemd-analyze
// security --offline=yes and fails above MaxExposure.
func TestServiceExposure(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed")
	}
	if out, _ := exec.Command("systemd-analyze", "security", "--help").CombinedOutput(); !bytes.Contains(out, []byte("--offline")) {
		t.Skip("systemd-analyze lacks security --offline (systemd < 252)")
	}
	j := validJob(t, "* * * * *", "")
	j.DenyAddresses = []string{"10.20.0.5"}
	r, err := Render(j, testPaths(t))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), r.Name+".service")
	if err := os.WriteFile(p, r.Service, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", p)
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0")
	// The exit status says whether the score passed --threshold, which is
	// not given; the score itself is read from the output.
	out, _ := cmd.CombinedOutput()
	m := exposureRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security printed no overall exposure:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("overall exposure %.1f", score)
	if score > MaxExposure {
		t.Errorf("overall exposure %.1f, want at most %.1f:\n%s", score, MaxExposure, out)
	}
}

// TestRenderRejectsHostileFields tries to smuggle directives, specifiers and
// extra words through every field that reaches a unit.
func TestRenderRejectsHostileFields(t *testing.T) {
	hostile := []string{
		"a\nExecStartPre=/bin/sh", "a%n", "a$USER", `a\nb`, `a"b`, "a'b", "a;b", "a\x00b", "a b", "", "..", "A",
	}
	set := map[string]func(*Job, string){
		"tenant":  func(j *Job, v string) { j.Tenant = v },
		"id":      func(j *Job, v string) { j.ID = v },
		"user":    func(j *Job, v string) { j.User = v },
		"group":   func(j *Job, v string) { j.Group = v },
		"webroot": func(j *Job, v string) { j.Webroot = "/srv/" + v },
		"lockdir": func(j *Job, v string) { j.LockDir = "/srv/" + v },
		"calendar": func(j *Job, v string) {
			j.OnCalendar = []string{"*-*-* 00:00:00 UTC" + v}
		},
	}
	for field, apply := range set {
		for _, v := range hostile {
			j := validJob(t, "* * * * *", "")
			apply(&j, v)
			harmless := v == "A" || (field == "calendar" && v == "")
			if harmless && (field == "webroot" || field == "lockdir" || field == "calendar") {
				continue // a plain upper-case path element or zone suffix is fine
			}
			if _, err := Render(j, DefaultPaths); err == nil {
				t.Errorf("%s=%q rendered without error", field, v)
			}
		}
	}
	for _, p := range []string{"/srv/../etc", "/srv/./x", "relative", "/srv//x", "/srv/x/"} {
		if ValidPath(p) {
			t.Errorf("ValidPath(%q) = true", p)
		}
	}
}

// TestRenderedUnitsVerify runs systemd-analyze verify over units rendered
// for a spread of schedules and zones.
func TestRenderedUnitsVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is required in CI")
		}
		t.Skip("systemd-analyze not installed")
	}
	paths := testPaths(t)
	dir := t.TempDir()
	var files []string
	cases := []struct{ expr, tz string }{
		{"* * * * *", ""}, {"*/5 * * * *", "Europe/Berlin"}, {"30 4 1,15 * 5", "America/New_York"},
		{"0 9 * * mon-fri", "Asia/Kolkata"}, {"@yearly", ""}, {"0-30/10 8-18 */2 jan,jul 1-5", "Europe/Berlin"},
	}
	for i, c := range cases {
		j := validJob(t, c.expr, c.tz)
		j.ID = strings.Replace(jobID, "0b6f", "0b6"+string(rune('0'+i)), 1)
		r, err := Render(j, paths)
		if err != nil {
			t.Fatal(err)
		}
		for ext, content := range map[string][]byte{".timer": r.Timer, ".service": r.Service} {
			p := filepath.Join(dir, r.Name+ext)
			if err := os.WriteFile(p, content, 0o644); err != nil {
				t.Fatal(err)
			}
			files = append(files, p)
		}
	}
	cmd := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, files...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestDelayFor(t *testing.T) {
	for in, want := range map[time.Duration]int{time.Minute: 15, time.Hour: 15, 10 * time.Second: 4, 20 * time.Second: 9, time.Second: 0} {
		if got := DelayFor(in); got != want {
			t.Errorf("DelayFor(%v) = %d, want %d", in, got, want)
		}
	}
}

// TestRenderPersistentOnlyWithCatchUp: systemd fires a missed slot at
// boot or activation only for a job with a catch-up window.
func TestRenderPersistentOnlyWithCatchUp(t *testing.T) {
	j := validJob(t, "0 * * * *", "UTC")
	for _, persistent := range []bool{false, true} {
		j.Persistent = persistent
		r, err := Render(j, DefaultPaths)
		if err != nil {
			t.Fatal(err)
		}
		want, not := "\nPersistent=no\n", "\nPersistent=yes\n"
		if persistent {
			want, not = not, want
		}
		if !bytes.Contains(r.Timer, []byte(want)) || bytes.Contains(r.Timer, []byte(not)) {
			t.Errorf("persistent %v: timer lacks %q or has %q:\n%s", persistent, want, not, r.Timer)
		}
	}
}

// TestRenderStartTimeoutCoversTheWait: a job whose start may wait (an
// overlap policy, a catch-up) gets TimeoutStartSec = timeout + wait, so
// the wait never eats into the tenant's timeout; one that never waits
// keeps TimeoutStartSec = timeout, as before.
func TestRenderStartTimeoutCoversTheWait(t *testing.T) {
	for _, c := range []struct {
		timeout, wait int
		want          string
	}{
		{300, 0, "\nTimeoutStartSec=300s\n"},
		{300, 460, "\nTimeoutStartSec=760s\n"},
	} {
		j := validJob(t, "0 * * * *", "UTC")
		j.TimeoutSec, j.WaitSec = c.timeout, c.wait
		r, err := Render(j, DefaultPaths)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(r.Service, []byte(c.want)) {
			t.Errorf("timeout %d wait %d: service lacks %q:\n%s", c.timeout, c.wait, c.want, r.Service)
		}
	}
	j := validJob(t, "0 * * * *", "UTC")
	j.WaitSec = -1
	if j.Validate() == nil {
		t.Error("a negative wait validated")
	}
}

// TestRenderKillsTheWholeCgroup: the service keeps systemd's default
// KillMode, control-group: when the runner exits, whatever the command
// left in the unit's cgroup (a process that moved itself out of the
// group the runner signals) is killed. Any other mode would let such a
// process outlive a timeout or a cancel_previous stop.
func TestRenderKillsTheWholeCgroup(t *testing.T) {
	r, err := Render(validJob(t, "0 * * * *", "UTC"), DefaultPaths)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(r.Service), "\n") {
		if v, ok := strings.CutPrefix(line, "KillMode="); ok && v != "control-group" {
			t.Errorf("service sets %s", line)
		}
	}
}

// FuzzValidPath holds ValidPath to the rule it had as a regexp and a
// split (it became one pass over the bytes for speed): same answer for
// every string.
func FuzzValidPath(f *testing.F) {
	for _, p := range []string{"/", "/srv", "/srv/www/acme", "/srv/../etc", "/srv/./x", "relative", "/srv//x", "/srv/x/",
		"/a..b/.c/d.", "/x y", "//", "/.", "/..", "/...", "", "/é"} {
		f.Add(p)
	}
	re := regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)
	reference := func(p string) bool {
		if len(p) > 1024 || !re.MatchString(p) {
			return false
		}
		for _, el := range strings.Split(p[1:], "/") {
			if el == "." || el == ".." {
				return false
			}
		}
		return true
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := ValidPath(p), reference(p); got != want {
			t.Errorf("ValidPath(%q) = %v, want %v", p, got, want)
		}
	})
}
