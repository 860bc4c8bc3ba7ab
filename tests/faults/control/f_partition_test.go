//go:build e2e

package control

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// partition is how long the node is cut off: issue 12 (f)'s six minutes,
// more than max_failures × interval many times over (so a bug that counted
// its unreported slots, or their lost records, would auto-disable the
// job), the sweeper records those slots lost (timeout + grace) many times
// over, and each spooled report's backoff grows past its cap, so recovery
// is tested from a spool that has stopped retrying often.
const partition = 6 * time.Minute

// TestNodePartitionedFromAPI (issue 12, scenario f): the node that wins a
// 10-second job's elections is cut off from the core API (its packets to
// the API dropped by iptables; the API stays up, the node keeps Temporal
// and the shared storage) for six minutes. It keeps running the slots;
// its outcome hooks spool them; the sweeper records them lost meanwhile.
// After the partition the spooled real outcomes replace every lost
// record: one record per slot, each a witnessed run, none duplicated, the
// job never auto-disabled (max_failures 2) and its counter at zero.
func TestNodePartitionedFromAPI(t *testing.T) {
	ctx := context.Background()
	const file = "partition.log"
	job := c.NewJob(t, "acme", "*/10 * * * * *", harness.WitnessCommand(file, ""), timeout, 64, 2)
	dumpOnFailure(t, job.UnitName())
	t.Cleanup(func() { stopJob(t, job.ID) })
	waitJob(t, job.ID, 2*time.Minute, "active", func(j store.CronJob) bool { return j.Status == wire.StatusActive })
	var victim string
	poll(t, time.Minute, "three witnessed runs", func() (bool, error) {
		execs := harness.ReadWitness(t, witnessPath(file))
		if len(execs) < 3 {
			return false, nil
		}
		// FixedRandomDelay: the node with the shortest delay wins the
		// job's slots while it is healthy.
		victim = execs[len(execs)-1].Node
		return true, nil
	})

	heal, err := c.PartitionFromAPI(victim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := heal(); err != nil {
			t.Errorf("heal the partition: %v", err)
		}
	})
	cutAt := time.Now()
	t.Logf("%s cut off from the core API at %s", victim, cutAt.Format(time.TimeOnly))
	// Watch the history while the node is cut off: the slots it ran are
	// recorded lost, and the job must never be disabled.
	lostSeen := map[string]bool{}
	for time.Since(cutAt) < partition {
		runs, err := c.Store.ListRuns(ctx, job.ID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Result == wire.ResultLost {
				lostSeen[r.RunKey] = true
			}
		}
		if j := getJob(t, job.ID); !j.Enabled || j.Status == wire.StatusAutoDisabled {
			t.Errorf("during the partition the job became %s (enabled %v, %d failures)", j.Status, j.Enabled, j.ConsecutiveFailures)
		}
		time.Sleep(2 * time.Second)
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	healedAt := time.Now()
	t.Logf("healed at %s; %d slots were recorded lost meanwhile", healedAt.Format(time.TimeOnly), len(lostSeen))

	// Every slot of the partition gets its real result, from the spool.
	waitRealRuns(t, job.ID, cutAt, healedAt, 2*time.Minute)
	poll(t, time.Minute, victim+"'s spool drained", func() (bool, error) { return len(spoolLeft(t, victim)) == 0, nil })
	stopJob(t, job.ID)

	j := getJob(t, job.ID)
	if j.Status == wire.StatusAutoDisabled || j.ConsecutiveFailures != 0 {
		t.Errorf("job after the partition: %s, %d consecutive failures; want never auto-disabled, 0", j.Status, j.ConsecutiveFailures)
	}
	runs := runsBySlot(t, job.ID)
	byKey := harness.CheckExactlyOnce(t, harness.ReadWitness(t, witnessPath(file)), runs)
	if len(lostSeen) < 2 {
		t.Errorf("only %d slots were recorded lost during the partition: the scenario did not test the late outcome replacing lost", len(lostSeen))
	}
	for key := range lostSeen {
		r := byKey[key]
		switch {
		case !harness.RealResult(r.Result):
			t.Errorf("%s was recorded lost during the partition and is still %s", key, r.Result)
		case r.NodeID == nil || *r.NodeID != c.NodeIDs[victim]:
			t.Errorf("%s was replaced by a report of node %v, want the cut-off %s", key, r.NodeID, victim)
		}
	}
	// One record per slot from the first run to the last: none missed,
	// none lost.
	first, last := runs[0].ScheduledAt, runs[len(runs)-1].ScheduledAt
	if want := int(last.Sub(first)/every) + 1; len(runs) != want {
		t.Errorf("%d run records for %d slots between %s and %s", len(runs), want, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
	}
	for _, r := range runs {
		if r.Result == wire.ResultLost {
			t.Errorf("slot %s is still lost", r.ScheduledAt.Format(time.TimeOnly))
		}
	}
	t.Logf("%d slots, %d recorded lost during the %v partition and replaced by the spooled outcomes of %s", len(runs), len(lostSeen), partition, victim)
}
