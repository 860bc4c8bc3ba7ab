//go:build e2e

package faults

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// TestSharedStorageFaults (issue 11, scenario c): the lock directory is
// missing for three slots, then the shared mount is read-only on every
// node for three slots. Those slots end as platform_error under their own
// keys, the job is not auto-disabled (max_failures 2 would do it if they
// counted), and it runs again once storage is back.
//
// Not parallel: a read-only /srv/shared hits every tenant on the nodes, so
// Go runs it alone before the parallel scenarios resume.
func TestSharedStorageFaults(t *testing.T) {
	const every = 10 * time.Second
	ctx := context.Background()
	marker := filepath.Join(c.Shared, "www/globex/public/storage.log")
	job := c.NewJob(t, "globex", "*/10 * * * * *", harness.WitnessCommand("storage.log", ""), 20, 64, 2)
	applyAll(t, job)
	dumpOnFailure(t, job.UnitName())
	c.WaitRuns(t, job.ID, 60*time.Second, func(r []store.Run) bool { return countResult(r, wire.ResultSuccess) >= 2 })

	locks := filepath.Join(c.Shared, "www/globex/.locks")
	untilNextSlot(every, 5*time.Second)
	faultFrom := time.Now()
	if err := os.Rename(locks, locks+".away"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * every)
	if err := os.Rename(locks+".away", locks); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if out, err := c.Exec(n, nil, "mount", "-o", "remount,ro,bind", "/srv/shared"); err != nil {
			t.Fatalf("read-only remount on %s: %v %s", n, err, out)
		}
	}
	time.Sleep(3 * every)
	for _, n := range c.Nodes {
		if out, err := c.Exec(n, nil, "mount", "-o", "remount,rw,bind", "/srv/shared"); err != nil {
			t.Fatalf("read-write remount on %s: %v %s", n, err, out)
		}
	}
	faultUntil := time.Now()
	c.WaitRuns(t, job.ID, 60*time.Second, func(r []store.Run) bool {
		return countResult(r, wire.ResultSuccess, func(x store.Run) bool { return x.ScheduledAt.After(faultUntil) }) >= 2
	})
	j, err := c.Store.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	disableEverywhere(t, job.ID, 3*time.Second)

	if j.Status == wire.StatusAutoDisabled || !j.Enabled {
		t.Errorf("job is %s (enabled %v) after a storage fault: platform faults counted against the tenant", j.Status, j.Enabled)
	}
	runs := runsBySlot(t, job.ID)
	harness.CheckExactlyOnce(t, harness.ReadWitness(t, marker), runs)
	platform := 0
	for _, r := range runs {
		if r.ScheduledAt.Truncate(every) != r.ScheduledAt {
			t.Errorf("run %s is not under a slot of the schedule", r.RunKey)
		}
		// A slot fires on the nodes within its random delay (under half
		// the interval): one whose fires all lie inside the fault must be
		// a platform error, one whose fires all lie outside must not; the
		// two at the edges may be either.
		fires := [2]time.Time{r.ScheduledAt, r.ScheduledAt.Add(every / 2)}
		inside := !fires[0].Before(faultFrom) && fires[1].Before(faultUntil)
		outside := fires[1].Before(faultFrom) || fires[0].After(faultUntil)
		switch {
		case inside && r.Result != wire.ResultPlatformError:
			t.Errorf("slot %s during the storage fault: %s (%s), want platform_error", r.ScheduledAt, r.Result, r.FailureReason)
		case outside && r.Result == wire.ResultPlatformError:
			t.Errorf("slot %s outside the storage fault: platform_error (%s)", r.ScheduledAt, r.FailureReason)
		}
		if r.Result == wire.ResultPlatformError {
			platform++
		}
	}
	if platform < 5 {
		t.Errorf("%d platform_error records for six faulty slots: a slot went unreported", platform)
	}
	t.Logf("%d runs, %d platform errors", len(runs), platform)
}

// countResult counts runs with result r that pass every filter.
func countResult(runs []store.Run, r wire.Result, filters ...func(store.Run) bool) int {
	n := 0
outer:
	for _, x := range runs {
		if x.Result != r {
			continue
		}
		for _, f := range filters {
			if !f(x) {
				continue outer
			}
		}
		n++
	}
	return n
}
