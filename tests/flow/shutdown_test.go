//go:build e2e

package flow

import (
	"strings"
	"testing"
	"time"
)

// TestNodeShutdownDuringRunIsThePlatforms: a node shut down cleanly (its
// nspawn asks its systemd to halt, as a reboot for maintenance would)
// while it runs a job stops the run; the run is recorded as
// platform_error naming the shutdown, with the command's own signal or
// exit code, and it does not count towards auto-disable (max_failures 1
// would auto-disable on one counted failure).
func TestNodeShutdownDuringRunIsThePlatforms(t *testing.T) {
	id, key, _ := longRunNow(t, "flow-shutdown-started")
	node := runningOn(t, id)
	if node == "" {
		t.Fatal("the API says running, but no node's service runs")
	}

	if err := c.StopNode(node); err != nil {
		t.Fatal(err)
	}
	// Back at once: a report the shutdown kept from the core (the node's
	// network went first) is in its spool, which its agent delivers.
	if err := c.StartNode(node); err != nil {
		t.Fatal(err)
	}
	r := recordedWithin(t, id, key, 120*time.Second, func() {
		// The previous boot's journal of the unit (the hook's lines) and
		// the node's spool: where the report went.
		out, _ := c.Exec(node, nil, "journalctl", "-b", "-1", "--no-pager", "-u", unitName(id)+".service")
		t.Logf("%s's journal of the run's service, boot before:\n%s", node, out)
		out, _ = c.Exec(node, nil, "find", "/var/spool/hostcron", "-type", "f")
		t.Logf("%s's spool:\n%s", node, out)
	})
	reason, _ := r["failure_reason"].(string)
	if r["result"] != "platform_error" || !strings.Contains(reason, "shut down") {
		t.Fatalf("run recorded %v (%q), want platform_error naming the shutdown", r["result"], reason)
	}
	j := call(t, "GET", "/api/v1/cron-jobs/"+id, "", 200)
	if j["status"] != "active" || j["consecutive_failures"] != 0.0 {
		t.Errorf("after the node's shutdown the job is %v with %v counted failures, want active with 0", j["status"], j["consecutive_failures"])
	}
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 90*time.Second)
}
