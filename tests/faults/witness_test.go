//go:build e2e

package faults

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// applyAll applies jobs on every node with the node agent.
func applyAll(t *testing.T, jobs ...wire.Job) {
	t.Helper()
	for _, n := range c.Nodes {
		c.Agent(t, n, jobs, nil, "apply")
	}
}

// desired reads a job back from the store as nodes must have it.
func desired(t *testing.T, id string) wire.Job {
	t.Helper()
	d, _, err := c.Store.DesiredJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// disableEverywhere disables a job in the store and on every node, then
// waits for a run in flight to report.
func disableEverywhere(t *testing.T, id string, settle time.Duration) {
	t.Helper()
	if _, err := c.Store.DisableJob(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	applyAll(t, desired(t, id))
	time.Sleep(settle)
}

// runsBySlot lists a job's runs oldest slot first.
func runsBySlot(t *testing.T, id string) []store.Run {
	t.Helper()
	runs, err := c.Store.ListRuns(context.Background(), id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ScheduledAt.Before(runs[j].ScheduledAt) })
	return runs
}

// untilNextSlot sleeps until offset after the next multiple of every.
func untilNextSlot(every, offset time.Duration) {
	now := time.Now()
	next := now.Truncate(every).Add(offset)
	for !next.After(now) {
		next = next.Add(every)
	}
	time.Sleep(time.Until(next))
}

// dumpOnFailure logs, when the test fails, what each node's journal says
// about the job's units: the runner's decisions are there, one line each.
func dumpOnFailure(t *testing.T, unit string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range c.Nodes {
			out, _ := c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "short-precise", "-n", "150", "-u", unit+".service", "-u", unit+".timer")
			t.Logf("journal of %s on %s:\n%s", unit, n, out)
		}
	})
}
