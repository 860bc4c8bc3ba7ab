//go:build e2e

package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// agentService is the node agent's systemd service (packaging/systemd).
const agentService = "hostcron-node-agent.service"

// TestRunNowAgentKilled (issue 11, scenario e, second half): the node
// agent is killed with SIGKILL in the middle of a run-now, twice: right
// after it wrote the request file and before it started the unit, and
// right after it started the unit and before it could report. Each time
// the node's agent daemon is killed too and comes back through Restart=,
// and the request is sent again with the same id, as Temporal retries the
// activity: on the same node and on the next one (the job workflow's
// fallback). Each request runs exactly once (the witness), its record is
// the real outcome under {job}#manual#{request}, a request sent again after
// it completed runs nothing on any node, and no cron unit on any node
// needs a daemon-reload.
//
// The agent's own command does the run-now (node-agent run-now, the same
// admission and unit manager call as the daemon's RunNow activity); the
// host's strace holds it at the kill point (a delay injected after the
// request file's rename, or before its exit), so the kill lands there
// every time, not by chance.
//
// Not parallel: it checks NeedDaemonReload of every cron unit on every
// node, which another scenario's apply in flight would show for a moment.
func TestRunNowAgentKilled(t *testing.T) {
	if _, err := exec.LookPath("strace"); err != nil {
		t.Fatalf("strace (the host's) holds the agent at the kill point: %v", err)
	}
	marker := filepath.Join(c.Shared, "www/acme/public/runnow.log")
	// Never due: only run-now starts it.
	job := c.NewJob(t, "acme", "0 0 1 1 *", harness.WitnessCommand("runnow.log", "sleep 3"), 60, 64, 0)
	unit := job.UnitName()
	applyAll(t, job)
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			c.Agent(t, n, nil, nil, "remove", unit)
		}
	})
	dumpOnFailure(t, unit)
	a, b := c.Nodes[0], c.Nodes[1]
	base := strconv.FormatInt(time.Now().UnixNano(), 36)
	manual := func(req string) string { return runkey.Manual(job.ID, req) }

	// 1. Killed after the request file, before the start.
	req1 := base + "-1"
	inv := invocation(t, a, unit)
	killRunNowAt(t, a, unit, req1, "rename,renameat,renameat2", "delay_exit", func() bool {
		out, _ := c.Exec(a, nil, "cat", wire.RunNowDir+"/"+unit)
		return strings.HasPrefix(out, req1+"\n")
	})
	if now := invocation(t, a, unit); now != inv {
		t.Fatalf("%s started (invocation %s → %s) although the agent was killed before it started the unit", unit, inv, now)
	}
	restartAgent(t, a)
	retry(t, job, req1, a, b)
	// A request sent again after it completed, on any node, runs nothing.
	for _, n := range c.Nodes {
		resendCompleted(t, n, unit, req1)
	}

	// 2. Killed after the start, before it could report.
	req2 := base + "-2"
	killRunNowAt(t, a, unit, req2, "exit_group", "delay_enter", func() bool {
		for _, e := range harness.ReadWitness(t, marker) {
			if e.Key.String() == manual(req2) {
				return true
			}
		}
		return false
	})
	restartAgent(t, a)
	retry(t, job, req2, a, b)
	for _, n := range c.Nodes {
		resendCompleted(t, n, unit, req2)
	}

	execs := harness.ReadWitness(t, marker)
	runs := runsBySlot(t, job.ID)
	byKey := harness.CheckExactlyOnce(t, execs, runs)
	ran := map[string]int{}
	for _, e := range execs {
		ran[e.Key.String()]++
	}
	for _, req := range []string{req1, req2} {
		if ran[manual(req)] != 1 {
			t.Errorf("request %s ran %d times, want once", req, ran[manual(req)])
		}
		if r, ok := byKey[manual(req)]; !ok || r.Result != wire.ResultSuccess {
			t.Errorf("request %s recorded as %+v, want a manual success", req, r)
		}
	}
	if len(execs) != 2 || len(runs) != 2 {
		t.Errorf("%d executions and %d run records for two requests", len(execs), len(runs))
	}
	for _, n := range c.Nodes {
		out, err := c.Exec(n, nil, "sh", "-c",
			"systemctl list-units --all --plain --no-legend 'cron-*' | awk '{print $1}' | "+
				"xargs -r systemctl show -p Id -p NeedDaemonReload | grep -B1 NeedDaemonReload=yes || true")
		if err != nil {
			t.Fatalf("NeedDaemonReload on %s: %v %s", n, err, out)
		}
		if strings.TrimSpace(out) != "" {
			t.Errorf("cron units on %s need a daemon-reload after the agent was killed:\n%s", n, out)
		}
	}
	t.Logf("2 requests, %d executions, %d run records", len(execs), len(runs))
}

// killRunNowAt runs `node-agent run-now` on node under the host's strace,
// which injects a 20 s delay at syscalls (delay_exit: after the call;
// delay_enter: before it), waits until reached reports the agent is held
// there, and kills the agent with SIGKILL.
func killRunNowAt(t *testing.T, node, unit, request, syscalls, delay string, reached func() bool) {
	t.Helper()
	leader, err := c.NodesSh("pid", node)
	if err != nil {
		t.Fatalf("leader of %s: %v %s", node, err, leader)
	}
	cmd := exec.Command("strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace="+syscalls,
		"-e", "inject="+syscalls+":"+delay+"=20000000",
		"nsenter", "-t", strings.TrimSpace(leader), "-a", "/usr/local/bin/node-agent", "run-now", unit, request)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start strace: %v", err)
	}
	done := false
	t.Cleanup(func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	for deadline := time.Now().Add(30 * time.Second); !reached(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node-agent run-now %s on %s never reached the kill point:\n%s", request, node, out.String())
		}
	}
	agent := descendant(t, cmd.Process.Pid, "node-agent")
	nsenter := descendant(t, cmd.Process.Pid, "nsenter")
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 node-agent run-now (pid %d): %v", agent, err)
	}
	// strace keeps its tracee stopped until the injected delay is over,
	// SIGKILL or not; killing strace detaches it, and the pending SIGKILL
	// ends it before it runs another instruction. nsenter then reports
	// its child's death and exits.
	_ = cmd.Process.Kill()
	err = cmd.Wait()
	done = true
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if gone(agent) && gone(nsenter) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-agent (pid %d) or nsenter (pid %d) still there 10 s after the kill", agent, nsenter)
		}
	}
	t.Logf("node-agent run-now %s on %s killed at %s %s (pid %d): strace %v", request, node, delay, syscalls, agent, err)
}

// gone reports whether a host process has exited (a zombie has).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	return err != nil || i < 0 || strings.HasPrefix(strings.TrimSpace(string(b)[i+1:]), "Z")
}

// descendant finds the process named comm below pid (host PIDs).
func descendant(t *testing.T, pid int, comm string) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	name := map[int]string{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 {
			continue
		}
		f := strings.Fields(string(b)[i+1:])
		if len(f) < 2 {
			continue
		}
		parent[p], _ = strconv.Atoi(f[1])
		name[p] = string(b)[strings.IndexByte(string(b), '(')+1 : i]
	}
	for p, n := range name {
		if n != comm {
			continue
		}
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				return p
			}
		}
	}
	t.Fatalf("no %s below pid %d", comm, pid)
	return 0
}

// restartAgent kills the node's agent daemon with SIGKILL and waits for
// systemd to bring it back (Restart=).
func restartAgent(t *testing.T, node string) {
	t.Helper()
	before := unitProps(t, node, agentService, "MainPID", "NRestarts")
	if out, err := c.Exec(node, nil, "kill", "-9", before["MainPID"]); err != nil {
		t.Fatalf("kill -9 the agent (pid %s) on %s: %v %s", before["MainPID"], node, err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		now := unitProps(t, node, agentService, "MainPID", "NRestarts", "ActiveState")
		if now["ActiveState"] == "active" && now["MainPID"] != "0" && now["MainPID"] != before["MainPID"] && now["NRestarts"] != before["NRestarts"] {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent on %s did not come back after kill -9: %v (before %v)", node, now, before)
		}
	}
}

// retry sends the request again as a retried activity would: on the first
// node and, while that run may still be under way, on the second. The
// request then has exactly one successful record.
func retry(t *testing.T, job wire.Job, request, first, second string) {
	t.Helper()
	unit := job.UnitName()
	for _, n := range []string{first, second} {
		if out, err := c.Exec(n, nil, "/usr/local/bin/node-agent", "run-now", unit, request); err != nil {
			t.Fatalf("node-agent run-now %s on %s: %v %s", request, n, err, out)
		}
	}
	key := runkey.Manual(job.ID, request)
	c.WaitRuns(t, job.ID, 60*time.Second, func(r []store.Run) bool {
		for _, x := range r {
			if x.RunKey == key && x.Result == wire.ResultSuccess {
				return true
			}
		}
		return false
	})
	for _, n := range []string{first, second} {
		waitInactive(t, n, unit)
	}
}

// resendCompleted sends a completed request again on node and waits until
// the unit is at rest. The agent sees the request decided on shared
// storage and need not start the unit at all; if it does, that start must
// run nothing (the witness count checks it).
func resendCompleted(t *testing.T, node, unit, request string) {
	t.Helper()
	if out, err := c.Exec(node, nil, "/usr/local/bin/node-agent", "run-now", unit, request); err != nil {
		t.Fatalf("node-agent run-now %s on %s: %v %s", request, node, err, out)
	}
	waitInactive(t, node, unit)
}

// waitInactive waits for a unit's service to be neither starting nor
// running.
func waitInactive(t *testing.T, node, unit string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		s := unitProps(t, node, unit+".service", "ActiveState")["ActiveState"]
		if s == "inactive" || s == "failed" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s still %s", unit, node, s)
		}
	}
}

// invocation is the invocation id of a unit's service's last start ("" if
// it never started).
func invocation(t *testing.T, node, unit string) string {
	t.Helper()
	return unitProps(t, node, unit+".service", "InvocationID")["InvocationID"]
}

// unitProps reads properties of a unit on a node.
func unitProps(t *testing.T, node, unit string, props ...string) map[string]string {
	t.Helper()
	args := []string{"systemctl", "show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, err := c.Exec(node, nil, args...)
	if err != nil {
		t.Fatalf("systemctl show %s on %s: %v %s", unit, node, err, out)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}
