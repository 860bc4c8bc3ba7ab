//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestScheduleChangeDuringRunReports: a run under "*/10 * * * * *" is still
// running when the schedule becomes "5/10 * * * * *". systemd 252 has
// removed the run's credentials (its copy of the spec) by ExecStopPost, so
// cron-outcome must judge the run's slot by the spec the agent kept, and
// report its real outcome. On the way it checks what the agent's run-now
// wait reads of a oneshot: activating while it runs, and a new
// InactiveEnterTimestampMonotonic once it has ended.
func TestScheduleChangeDuringRunReports(t *testing.T) {
	const node = "node1"
	job := c.NewJob(t, "acme", "*/10 * * * * *", "sleep 8", 30, 64, 5)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	// The tests after this one count the units on the nodes.
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })
	service := job.UnitName() + ".service"
	show := func(prop string) string {
		out, err := c.Exec(node, nil, "systemctl", "show", "-P", prop, service)
		if err != nil {
			t.Fatalf("systemctl show %s: %v %s", prop, err, out)
		}
		return strings.TrimSpace(out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for show("ActiveState") != "activating" {
		if time.Now().After(deadline) {
			t.Fatal("the job's run never started")
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := show("InactiveEnterTimestampMonotonic")

	job.Version, job.Schedule = job.Version+1, "5/10 * * * * *"
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	changed := time.Now()

	c.WaitRuns(t, job.ID, 40*time.Second, func(runs []store.Run) bool {
		for _, r := range runs {
			if r.ScheduledAt.Second()%10 == 0 && r.Result == wire.ResultSuccess && r.FinishedAt != nil && r.FinishedAt.After(changed) {
				return true
			}
		}
		return false
	})
	after, _ := strconv.ParseUint(show("InactiveEnterTimestampMonotonic"), 10, 64)
	if b, _ := strconv.ParseUint(before, 10, 64); after <= b {
		t.Errorf("InactiveEnterTimestampMonotonic %d after the run, %d during it: the agent's run-now wait cannot see a start end", after, b)
	}
	job.Enabled = false
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
}

// TestRunNowDuringARunRuns: a run-now request that arrives while the job's
// service runs (a timer fire every 10 s, each a timely one) would merge
// into the running start and never run. The agent waits for that start
// to end and starts the service again: the request runs, once, and is
// reported under its own key.
func TestRunNowDuringARunRuns(t *testing.T) {
	const node = "node2"
	job := c.NewJob(t, "acme", "*/10 * * * * *", "sleep 6", 30, 64, 5)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	// The tests after this one count the units on the nodes.
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })
	service := job.UnitName() + ".service"
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := c.Exec(node, nil, "systemctl", "show", "-P", "ActiveState", service)
		if strings.TrimSpace(out) == "activating" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job's run never started")
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.Agent(t, node, nil, nil, "run-now", job.UnitName(), "99") // returns once a runner took it
	key := job.ID + "#manual#99"
	c.WaitRuns(t, job.ID, 40*time.Second, func(runs []store.Run) bool {
		for _, r := range runs {
			if r.RunKey == key && r.Result == wire.ResultSuccess {
				return true
			}
		}
		return false
	})
	job.Enabled = false
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
}
