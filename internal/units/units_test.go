package units

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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
		"ReadWritePaths=/srv/shared/www/acme-shop/public /srv/shared/www/acme-shop/.locks\n",
		"SyslogIdentifier=" + r.Name + "\n", "SuccessExitStatus=75\n",
		"ExecStopPost=+/usr/local/bin/cron-outcome\n", "ExecStart=/usr/local/bin/cron-run\n",
		"LoadCredential=spec:/var/lib/hostcron/jobs/" + r.Name + ".json\n",
		"LogExtraFields=HOSTCRON_TENANT=acme-shop\n", "LogExtraFields=HOSTCRON_CRON_JOB_ID=" + jobID + "\n",
	} {
		if !bytes.Contains(r.Service, []byte(want)) {
			t.Errorf("service lacks %q:\n%s", want, r.Service)
		}
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
