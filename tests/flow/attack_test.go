//go:build e2e

package flow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// attackScript is acme's cron command (run by /bin/sh as acme in the real
// rendered unit, via `bash attack/probe.sh`). It reads its inputs from the
// attack dir in its webroot, writes what each probe saw to out-$mode/, and
// then forges its run record. Each probe has a control that must succeed.
const attackScript = `#!/bin/bash
set -u
A=attack
read -r mode <"$A/mode"
read -r TH TP LH LP AH AP <"$A/targets"
read -r GID GPID GSECRET <"$A/globex"
read -r NONCE <"$A/nonce"
out=$A/out-$mode
mkdir -p "$out"
hostname >"$out/node"

# (a) the control plane over TCP; the core API is the control.
tcp() { # name host port
	if err=$( { timeout 5 bash -c "exec 3<>/dev/tcp/$2/$3"; } 2>&1 ); then echo reached >"$out/$1"
	else echo "blocked: $err" >"$out/$1"; fi
}
tcp temporal "$TH" "$TP"
tcp loki "$LH" "$LP"
tcp api "$AH" "$AP"

# (c) journal fields naming globex's job.
printf 'MESSAGE=forged-logger-%s\nSYSLOG_IDENTIFIER=cron-globex-%s\nHOSTCRON_TENANT=globex\nHOSTCRON_CRON_JOB_ID=%s\n' "$NONCE" "$GID" "$GID" >"$out/fields"
if logger --journald="$out/fields"; then echo ok; else echo "failed $?"; fi >"$out/logger"
if echo "forged-cat-$NONCE" | systemd-cat -t "cron-globex-$GID"; then echo ok; else echo "failed $?"; fi >"$out/systemd-cat"

# (d) globex's running job; acme's own process is the control.
if v=$( { tr '\0' ' ' </proc/$GPID/cmdline; } 2>&1 ); then echo "read: $v"; else echo "blocked: $v"; fi >"$out/proc-target"
grep -l -a -- "$GSECRET" /proc/[0-9]*/cmdline >"$out/proc-scan" 2>/dev/null
stat -c %u /proc/[0-9]* 2>/dev/null | sort -u >"$out/proc-uids"
bash -c 'sleep 60; true' "acme-own-$NONCE" &
own=$!
sleep 0.3
grep -l -a -- "acme-own-$NONCE" /proc/[0-9]*/cmdline >"$out/proc-own" 2>/dev/null
kill $own

# (e) the runner, the command's parent's parent and the same user:
# attaching to it could make it exit as a platform error.
rp=$PPID
[ "$(cat /proc/$rp/comm 2>/dev/null)" = cron-run ] || rp=$(awk '/^PPid:/{print $2}' /proc/$PPID/status)
echo "$rp $(cat /proc/$PPID/comm) $( { cat /proc/$rp/comm; } 2>&1 )" >"$out/runner-pid"
if v=$( { head -c 16 /proc/$rp/environ >/dev/null; } 2>&1 ); then echo read; else echo "blocked: $v"; fi >"$out/runner-environ"
if v=$( { exec 4</proc/$rp/mem; } 2>&1 ); then echo opened; else echo "blocked: $v"; fi >"$out/runner-mem"
if v=$( { head -c 16 /proc/$$/environ >/dev/null; } 2>&1 ); then echo read; else echo "blocked: $v"; fi >"$out/own-environ"

echo "acme-control-$NONCE-$mode"

# (b) rewrite the runner's final record, after the command has exited:
# systemd sends SIGTERM to what is left (ignored) and SIGKILL 10 s later;
# cron-outcome then reads what this loop left.
forge() {
	trap '' TERM
	d=/run/hostcron/cron-acme-$HOSTCRON_CRON_JOB_ID
	while :; do
		if grep -q '"finished_at"' "$d/record.json" 2>/dev/null && ! grep -q '"forged"' "$d/record.json"; then
			case $mode in
			success) sed -e 's/"exit_code":3/"exit_code":0/' ;;
			platform_error) sed -e 's/"kind":"ran"/"kind":"platform_error","reason":"forged: shared storage failed"/' -e 's/,"exit_code":3//' ;;
			esac <"$d/record.json" | sed -e 's/^{/{"forged":true,/' >"$d/.forged" &&
				mv -f "$d/.forged" "$d/record.json" && cp "$d/record.json" "$out/forged.json"
		fi
		sleep 0.05
	done
}
forge </dev/null >/dev/null 2>&1 &
exit 3
`

// TestTenantAttacksFromItsCronJob: a tenant's cron command, running as the
// tenant in the real rendered unit on a booted node, tries to (a) reach
// Temporal's frontend and Loki, (b) forge its run record (success after
// exit 3; a platform error, which never counts), (c) log lines naming
// another tenant's job, (d) read another tenant's running job, and (e)
// attach to its runner. Every step must fail for the reason the platform
// gives, and each has a control that succeeds, so the test fails if a
// probe could not have worked anyway.
func TestTenantAttacksFromItsCronJob(t *testing.T) {
	if c.ControlPlaneIP() == "" {
		t.Fatal("the flow tier must run with harness.Options.DenyControlPlane")
	}
	ctx := context.Background()
	nonce := fmt.Sprint(time.Now().UnixNano())
	globex := c.Tenants["globex"]
	_, globexKey, err := c.Store.CreateAPIKey(ctx, globex.ID)
	if err != nil {
		t.Fatal(err)
	}

	// globex: a job that runs for minutes with a secret in its command line.
	secret := "globex-secret-" + nonce
	gid := createJobAs(t, globexKey, globex.ID, map[string]any{"webroot_id": c.Webroots["globex"].ID, "schedule": "0 5 * * *",
		"command": "echo globex-own-" + nonce + "; bash -c 'sleep 240; true' " + secret, "timeout_seconds": 300, "max_failures": 0})
	// acme: the attack.
	aid := createJobAs(t, key, c.Tenants["acme"].ID, map[string]any{"webroot_id": c.Webroots["acme"].ID, "schedule": "0 5 * * *",
		"command": "bash attack/probe.sh", "timeout_seconds": 120, "max_failures": 0})
	t.Cleanup(func() { // gone before the converge tests count the shard's jobs
		for id, k := range map[string]string{gid: globexKey, aid: key} {
			callAs(t, k, "DELETE", "/api/v1/cron-jobs/"+id, "", 0)
		}
		deadline := time.Now().Add(60 * time.Second)
		for _, id := range []string{gid, aid} {
			for {
				if _, err := c.Store.GetJob(ctx, id); errors.Is(err, store.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("job %s not deleted after 60s", id)
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
		}
	})
	waitStatusAs(t, globexKey, gid, "active", 60*time.Second)
	waitStatusAs(t, key, aid, "active", 60*time.Second)

	// The rendered unit denies the control plane (node config deny_addresses).
	for _, n := range c.Nodes {
		unit, err := os.ReadFile(filepath.Join(c.Root(n), "etc/systemd/system", unitName(aid)+".service"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "\nIPAddressDeny=" + c.ControlPlaneIP() + "\n"; !bytes.Contains(unit, []byte(want)) {
			t.Fatalf("%s: unit lacks %q", n, strings.TrimSpace(want))
		}
	}

	// globex's job runs; find it.
	callAs(t, globexKey, "POST", "/api/v1/cron-jobs/"+gid+"/run-now", "", 202)
	gnode, gpid := findProcess(t, "globex", secret, 60*time.Second, func() {
		runs, err := c.Store.ListRuns(ctx, gid, 10)
		t.Logf("globex's runs: %+v (%v)", runs, err)
		for _, n := range c.Nodes {
			j, _ := c.Exec(n, nil, "journalctl", "-u", "cron-globex-"+gid+".service", "--no-pager")
			t.Logf("%s:\n%s", n, tail(j, 20))
		}
	})
	t.Logf("globex's job runs on %s as pid %s", gnode, gpid)

	// The attack's inputs, in acme's webroot (root's files; the dir acme's).
	dir := filepath.Join(c.Shared, "www/acme/public/attack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 2001, 2001); err != nil {
		t.Fatal(err)
	}
	th, tp := splitHostPort(t, c.TemporalAddress())
	lu, _ := url.Parse(c.LokiURL)
	au, _ := url.Parse(c.APIURL)
	writeInput(t, dir, "probe.sh", attackScript)
	writeInput(t, dir, "targets", strings.Join([]string{th, tp, lu.Hostname(), lu.Port(), au.Hostname(), au.Port()}, " ")+"\n")
	writeInput(t, dir, "globex", gid+" "+gpid+" "+secret+"\n")
	writeInput(t, dir, "nonce", nonce+"\n")

	var runs []store.Run
	for i, mode := range []string{"success", "platform_error"} {
		writeInput(t, dir, "mode", mode+"\n")
		call(t, "POST", "/api/v1/cron-jobs/"+aid+"/run-now", "", 202)
		runs = c.WaitRuns(t, aid, 90*time.Second, func(r []store.Run) bool { return len(r) == i+1 })
		out := filepath.Join(dir, "out-"+mode)

		// (b) The forgery happened, cron-outcome saw it, and the run
		// recorded is what systemd saw: exit 3.
		forged := readOut(t, out, "forged.json")
		var rec map[string]any
		if err := json.Unmarshal([]byte(forged), &rec); err != nil || rec["forged"] != true {
			t.Fatalf("%s: no forged record was put in place (%v): %s", mode, err, forged)
		}
		if mode == "platform_error" && rec["kind"] != "platform_error" || mode == "success" && rec["exit_code"] != 0.0 {
			t.Fatalf("%s: the forged record does not claim it: %s", mode, forged)
		}
		node := readOut(t, out, "node")
		journal, _ := c.Exec(node, nil, "journalctl", "-u", unitName(aid)+".service", "--no-pager", "-o", "cat")
		if !strings.Contains(journal, "run record contradicts systemd") {
			t.Errorf("%s: cron-outcome on %s did not notice the forged record:\n%s", mode, node, tail(journal, 15))
		}
		r := newest(runs)
		t.Logf("(b) record forged to claim %s (%s); recorded: %s, exit %v, %q", mode, forged, r.Result, deref(r.ExitCode), r.FailureReason)
		if r.Result != wire.ResultExitCode || r.ExitCode == nil || *r.ExitCode != 3 {
			t.Errorf("(b) %s: recorded %s exit %v, want exit_code 3 (what systemd saw)", mode, r.Result, deref(r.ExitCode))
		}
	}

	out := filepath.Join(dir, "out-success")
	node := readOut(t, out, "node")
	if node != gnode {
		t.Fatalf("acme's probe ran on %s, globex's job on %s: (d) needs them on one node", node, gnode)
	}

	// (a) Temporal and Loki refused by the node's filter: IPAddressDeny=
	// (EPERM) where systemd enforces it, else the operator's firewall
	// (EHOSTUNREACH from its admin-prohibited reject). Not "refused"
	// (nothing listening) or a timeout: the controls show both listen, and
	// the same probe reaches the core API.
	for _, p := range []string{"temporal", "loki"} {
		got := readOut(t, out, p)
		t.Logf("(a) %s from acme's job: %s", p, got)
		if !strings.HasPrefix(got, "blocked:") || !(strings.Contains(got, "Operation not permitted") || strings.Contains(got, "No route to host")) {
			t.Errorf("(a) %s: %q, want blocked by the node's filter", p, got)
		}
	}
	if got := readOut(t, out, "api"); got != "reached" {
		t.Errorf("(a) control: the core API from acme's job: %q, want reached", got)
	}
	for _, a := range []string{c.TemporalAddress(), lu.Host} {
		h, p := splitHostPort(t, a)
		if o, err := c.Exec(node, nil, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+h+"/"+p); err != nil {
			t.Errorf("(a) control: root on %s cannot reach %s: %v %s", node, a, err, o)
		}
	}

	// (c) The forged fields reached the journal (control), yet globex's
	// logs hold neither line: the shipper names the job by _SYSTEMD_UNIT.
	for _, f := range []string{"logger", "systemd-cat"} {
		if got := readOut(t, out, f); got != "ok" {
			t.Errorf("(c) %s: %q", f, got)
		}
	}
	// Matched by the forged field only: journald attributes a datagram to
	// its sender's unit by reading /proc/PID/cgroup, which a sender that
	// already exited (logger does at once) no longer has, so the entry may
	// carry no _SYSTEMD_UNIT (then nothing ships it at all). It may also
	// reach the journal a moment late.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		j, _ := c.Exec(node, nil, "journalctl", "HOSTCRON_CRON_JOB_ID="+gid, "--no-pager", "-o", "cat")
		if strings.Contains(j, "forged-logger-"+nonce) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("(c) control: the forged entry is not in %s's journal:\n%s", node, j)
			break
		}
	}
	waitLogLine(t, key, c.Tenants["acme"].ID, aid, "acme-control-"+nonce+"-success")
	waitLogLine(t, globexKey, globex.ID, gid, "globex-own-"+nonce) // control: globex's query finds globex's lines
	for _, m := range []string{"forged-logger-" + nonce, "forged-cat-" + nonce} {
		for _, job := range []string{gid, ""} {
			if code, lines := logLines(t, globexKey, globex.ID, job, m); code != 200 || len(lines) != 0 {
				t.Errorf("(c) globex's logs (job %q) asked for %q: %d, %v; want 200 and none", job, m, code, lines)
			}
		}
		_, lines := logLines(t, key, c.Tenants["acme"].ID, aid, m)
		t.Logf("(c) %q: in globex's logs 0 lines; in acme's job's logs %d", m, len(lines))
	}

	// (d) globex's process is invisible (ProtectProc=invisible); acme's own is not.
	if got := readOut(t, out, "proc-target"); !strings.HasPrefix(got, "blocked:") || !strings.Contains(got, "No such file or directory") {
		t.Errorf("(d) /proc/%s/cmdline of globex's job: %q, want it absent", gpid, got)
	} else {
		t.Logf("(d) /proc/%s/cmdline of globex's job: %s", gpid, got)
	}
	if got := readOut(t, out, "proc-scan"); got != "" {
		t.Errorf("(d) globex's secret found in %s", got)
	}
	if got := readOut(t, out, "proc-uids"); strings.Contains(got, "2002") {
		t.Errorf("(d) acme sees processes of uid 2002: %q", got)
	}
	if got := readOut(t, out, "proc-own"); !strings.Contains(got, "/cmdline") {
		t.Errorf("(d) control: acme cannot find its own process: %q", got)
	}
	if o, err := c.Exec(gnode, nil, "cat", "/proc/"+gpid+"/cmdline"); err != nil || !strings.Contains(o, secret) {
		t.Errorf("(d) control: globex's process %s is gone (%v): %q", gpid, err, o)
	}

	// (e) The runner cannot be attached to: it is not dumpable, so its
	// /proc files are root's and, under ProtectProc=invisible, the entry
	// is hidden from its own child. The command's own entry is readable.
	rp := strings.Fields(readOut(t, out, "runner-pid") + " - -")
	t.Logf("(e) runner pid %s (the command's parent: %s): environ %s; mem %s", rp[0], rp[1], readOut(t, out, "runner-environ"), readOut(t, out, "runner-mem"))
	if rp[0] == "" || rp[0] == "1" || rp[1] != "sh" && rp[1] != "cron-run" {
		t.Errorf("(e) the probe did not find its runner: %q", readOut(t, out, "runner-pid"))
	}
	for _, f := range []string{"runner-environ", "runner-mem"} {
		if got := readOut(t, out, f); !strings.HasPrefix(got, "blocked:") || !(strings.Contains(got, "Permission denied") || strings.Contains(got, "No such file or directory")) {
			t.Errorf("(e) %s: %q, want denied or hidden", f, got)
		}
	}
	if got := readOut(t, out, "own-environ"); got != "read" {
		t.Errorf("(e) control: the command's own environ: %q", got)
	}
}

// callAs is call with another tenant's key; want 0 accepts any answer.
func callAs(t testing.TB, apiKey, method, path, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, c.APIURL+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if want != 0 && resp.StatusCode != want {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, resp.StatusCode, want, out)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

func createJobAs(t testing.TB, apiKey, tenantID string, job map[string]any) string {
	t.Helper()
	body, _ := json.Marshal(job)
	return callAs(t, apiKey, "POST", "/api/v1/tenants/"+tenantID+"/cron-jobs", string(body), 201)["id"].(string)
}

func waitStatusAs(t testing.TB, apiKey, id, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := callAs(t, apiKey, "GET", "/api/v1/cron-jobs/"+id, "", 200)
		if j["status"] == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: status %v (%v), want %s", id, j["status"], j["status_message"], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findProcess returns the node and pid of user's process whose command
// line holds marker.
func findProcess(t *testing.T, user, marker string, timeout time.Duration, diagnose func()) (node, pid string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, n := range c.Nodes {
			if o, err := c.Exec(n, nil, "pgrep", "-u", user, "-f", marker); err == nil {
				if f := strings.Fields(o); len(f) > 0 {
					return n, f[0]
				}
			}
		}
		if time.Now().After(deadline) {
			diagnose()
			t.Fatalf("no process of %s with %q on any node after %v", user, marker, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func waitLogLine(t *testing.T, apiKey, tenantID, jobID, marker string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, lines := logLines(t, apiKey, tenantID, jobID, marker); code == 200 && len(lines) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("line %q not in the logs of job %s after 60s", marker, jobID)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func writeInput(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readOut(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("probe output %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

func splitHostPort(t *testing.T, a string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}

func newest(runs []store.Run) store.Run {
	n := runs[0]
	for _, r := range runs[1:] {
		if r.ReceivedAt.After(n.ReceivedAt) {
			n = r
		}
	}
	return n
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
