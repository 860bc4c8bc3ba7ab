package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// A slot whose attempt 1 failed and whose retry was cancelled (the tenant's
// cancel, or cancel_previous stopping the retry at the next slot) must not
// lose attempt 1's failure: nothing after it counted either way.
func TestCancelledRetryLeavesTheFailureBeforeItCounted(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(1, 1)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.Retry == "" {
		t.Fatalf("no retry queued: %+v", res)
	}
	res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultCancelled)
	n, err := f.st.ResolveDroppedRetries(context.Background(), time.Now().Add(48*time.Hour), store.RetryGrace)
	must(t, err)
	later := slot.Add(-24 * time.Hour) // any later recount
	res2 := f.attempt(j, runkey.Scheduled(j.ID, later), later, wire.ResultOverlapSkipped)
	if res.Job.ConsecutiveFailures != 1 || !res.AutoDisabled {
		t.Errorf("after the cancelled retry: failures %d auto_disabled %v (resolved %d, later recount %d); want attempt 1's failure to count (1, disabled)",
			res.Job.ConsecutiveFailures, res.AutoDisabled, n, res2.Job.ConsecutiveFailures)
	}
}

// A cancel of a retry still waiting out its delay drops the retry (its
// task was not sent, so no node could stop it: it would have run after
// the cancel) and queues no cancel task; the failed attempt before it
// counts again at the job's next recorded outcome.
func TestCancelOfAQueuedRetryDropsIt(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(1, 0)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	ctx := context.Background()
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_job_tasks SET dispatched_at = now() WHERE cron_job_id = $1`, j.ID)
	must(t, err)
	res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode)
	if res.Retry == "" {
		t.Fatalf("no retry queued: %+v", res)
	}
	if _, err := f.st.CancelRun(ctx, j.ID, res.Retry); err != nil {
		t.Fatalf("cancel of the queued retry: %v", err)
	}
	if left := f.retryTasks(j.ID); len(left) != 0 {
		t.Errorf("the cancelled retry is still queued: %v", left)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'cancel'`, j.ID); n != 0 {
		t.Errorf("%d cancel tasks queued for a retry that was never sent", n)
	}
	later := slot.Add(-24 * time.Hour)
	if got := f.attempt(j, runkey.Scheduled(j.ID, later), later, wire.ResultOverlapSkipped); got.Job.ConsecutiveFailures != 1 {
		t.Errorf("after the cancel the failed attempt counts %d, want 1", got.Job.ConsecutiveFailures)
	}
}
