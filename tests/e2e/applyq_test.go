//go:build e2e

package e2e

import (
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

// burstResult is node-agent burst's output (cmd/node-agent/burst.go).
type burstResult struct {
	Changes int      `json:"changes"`
	Plans   int      `json:"plans"`
	Reloads int      `json:"reloads"`
	Failed  []string `json:"failed"`
}

// TestApplyQueueBatchesConcurrentChanges (issue 16): 50 jobs created
// concurrently, each its own change as the daemon's activities bring
// them, reach enabled, active timers on a real systemd with far fewer
// daemon-reloads than jobs; a mass disable of them the same way stops
// every timer.
func TestApplyQueueBatchesConcurrentChanges(t *testing.T) {
	const n = 50
	jobs := make([]wire.Job, n)
	var names []string
	for i := range jobs {
		jobs[i] = c.NewJob(t, "acme", "0 3 29 2 *", "echo batched", 60, 64, 5)
		names = append(names, jobs[i].UnitName())
	}
	defer c.Agent(t, "node1", nil, nil, append([]string{"remove"}, names...)...)
	var res burstResult
	c.Agent(t, "node1", jobs, &res, "burst")
	if res.Changes != n || len(res.Failed) != 0 {
		t.Fatalf("burst: %+v", res)
	}
	t.Logf("%d concurrent creates: %d plans, %d reloads", n, res.Plans, res.Reloads)
	// The first change finds the node idle and runs alone; the others
	// queue behind it. A handful of reloads at most, never one per job
	// (none at all while systemd has never loaded the new units).
	if res.Reloads > n/5 || res.Plans > n/5 {
		t.Errorf("%d changes took %d plans and %d reloads, want at most %d", n, res.Plans, res.Reloads, n/5)
	}
	st := c.State(t, "node1")
	for _, j := range jobs {
		if s := st[j.UnitName()]; !s.TimerEnabled || !s.TimerActive || s.NextElapseUS == 0 {
			t.Errorf("%s after the burst: %+v", j.UnitName(), s)
		}
	}
	for i := range jobs {
		jobs[i].Enabled = false
		jobs[i].Version++
	}
	c.Agent(t, "node1", jobs, &res, "burst")
	if len(res.Failed) != 0 || res.Plans > n/5 {
		t.Errorf("mass disable: %+v", res)
	}
	t.Logf("%d concurrent disables: %d plans, %d reloads", n, res.Plans, res.Reloads)
	st = c.State(t, "node1")
	for _, j := range jobs {
		if s := st[j.UnitName()]; s.TimerEnabled || s.TimerActive {
			t.Errorf("%s after the mass disable: %+v", j.UnitName(), s)
		}
	}
}
