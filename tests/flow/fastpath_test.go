//go:build e2e

package flow

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestConvergeFastPath: on a real node, a converge after one that planned
// nothing skips the set (the core's digest and the node's fingerprint
// agree), across an agent restart; a timer stopped by hand makes the next
// converge run in full, which starts it again.
func TestConvergeFastPath(t *testing.T) {
	const node = "node2"
	id := createJob(t, "0 4 * * *")
	waitStatus(t, id, "active", 60*time.Second)
	timer := unitName(id) + ".timer"

	// The first converge after the job's apply plans nothing and leaves
	// the stamp; the next one is fast.
	if line := convergeOnRestart(t, node); fast(line) {
		t.Logf("first converge after the apply: %s", line) // may be fast already if an earlier converge stamped
	}
	if line := convergeOnRestart(t, node); !fast(line) {
		t.Fatalf("the converge after a converge that planned nothing was not fast: %s", line)
	}

	if out, err := c.Exec(node, nil, "systemctl", "stop", timer); err != nil {
		t.Fatalf("stop %s: %v %s", timer, err, out)
	}
	// systemd may unload the stopped timer at once (nothing references
	// it: the agent enabled it by a link, with no reload); the fast path's
	// list of every cron timer systemd holds shows it either way. (Not
	// checked with systemctl show, which would load it again.)
	line := convergeOnRestart(t, node)
	if fast(line) {
		t.Fatalf("the converge after a timer was stopped by hand was fast: %s", line)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !c.State(t, node)[unitName(id)].TimerActive {
		if time.Now().After(deadline) {
			t.Fatalf("the full converge did not start %s again", timer)
		}
		time.Sleep(500 * time.Millisecond)
	}
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 60*time.Second)
}

// fast tells whether the agent's line says the converge was done by the
// fast path (the agent logs JSON).
func fast(line string) bool { return strings.Contains(line, `"unchanged":true`) }

// fastPathLine matches the agent's log line of a converge's fast path.
var fastPathLine = regexp.MustCompile(`.*"msg":"converge fast path".*`)

// convergeOnRestart restarts node's agent (which announces itself, so
// the core converges it) and returns the new agent's "converge fast path"
// line of that converge, waiting for the full converge's end when it was
// not fast.
func convergeOnRestart(t *testing.T, node string) string {
	t.Helper()
	if out, err := c.Exec(node, nil, "systemctl", "restart", "hostcron-node-agent.service"); err != nil {
		t.Fatalf("restart agent on %s: %v %s", node, err, out)
	}
	pid, err := c.Exec(node, nil, "systemctl", "show", "-p", "MainPID", "--value", "hostcron-node-agent.service")
	if pid = strings.TrimSpace(pid); err != nil || pid == "" || pid == "0" {
		t.Fatalf("%s: the restarted agent's pid: %q %v", node, pid, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		// Only the new process's lines: the journal keeps the old one's.
		out, _ := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-o", "cat", "_PID="+pid)
		if line := fastPathLine.FindString(out); line != "" && (fast(line) || strings.Contains(out, "converge reconciled")) {
			return line
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no converge of agent %s within 90 s of its restart:\n%s", node, pid, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
