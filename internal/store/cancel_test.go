package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// A cancel is queued in the outbox with its run key and audited; a run
// that has ended is refused and queues nothing; a cancelled run counts
// neither way, and the sweeper leaves its slot alone.
func TestCancelRunQueuesTheStopAndCountsNeitherWay(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(2)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	key := runkey.Scheduled(j.ID, slot)
	tasks := func() int {
		return f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'cancel' AND run_key = $2`, j.ID, key)
	}
	if _, err := f.st.CancelRun(ctx, j.ID, key); err != nil {
		t.Fatal(err)
	}
	if n := tasks(); n != 1 {
		t.Fatalf("%d cancel tasks for %s, want 1", n, key)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1 AND action = 'cancel' AND detail->>'run_key' = $2`, j.ID, key); n != 1 {
		t.Fatalf("%d cancel events, want 1", n)
	}
	f.outcome(j, slot.Add(-time.Minute), wire.ResultExitCode)
	res := f.outcome(j, slot, wire.ResultCancelled)
	if res.Duplicate || res.Job.ConsecutiveFailures != 1 || res.Job.Status != wire.StatusActive {
		t.Fatalf("cancelled after one failure: %+v, want the counter kept at 1 and the job active", res.Job)
	}
	var conflict *store.ConflictError
	if _, err := f.st.CancelRun(ctx, j.ID, key); !errors.As(err, &conflict) {
		t.Fatalf("cancel of a recorded run: %v, want a conflict", err)
	}
	if n := tasks(); n != 1 {
		t.Fatalf("a refused cancel queued a task (%d)", n)
	}
	other := f.job(2)
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Scheduled(other.ID, slot)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another job's run key: %v, want not found", err)
	}
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Manual(j.ID, "999999")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown run-now request: %v, want not found", err)
	}
	_, request, err := f.st.RunNow(ctx, j.ID, 0)
	must(t, err)
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Manual(j.ID, request)); err != nil {
		t.Fatalf("cancel of a queued run-now: %v", err)
	}
	// An hour after dispatch the outbox row is pruned; a long run-now is
	// still cancellable by its audit event.
	_, err = f.st.Pool().Exec(ctx, `DELETE FROM cron_job_tasks WHERE id = $1::bigint`, request)
	must(t, err)
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Manual(j.ID, request)); err != nil {
		t.Fatalf("cancel of a run-now whose outbox row was pruned: %v", err)
	}
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Manual(j.ID, "0"+request)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run-now key the core never spells: %v, want not found", err)
	}
}

// A job's cancels still in the outbox are bounded: each asks every node of
// the shard, so a tenant cannot flood the node queues other tenants share.
func TestCancelsPendingPerJobAreBounded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(2)
	slot := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	for i := 0; i < store.MaxPendingCancels; i++ {
		if _, err := f.st.CancelRun(ctx, j.ID, runkey.Scheduled(j.ID, slot.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatalf("cancel %d: %v", i, err)
		}
	}
	var conflict *store.ConflictError
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Scheduled(j.ID, slot.Add(-time.Second))); !errors.As(err, &conflict) {
		t.Fatalf("cancel beyond the bound: %v, want a conflict", err)
	}
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_job_tasks SET dispatched_at = now() WHERE cron_job_id = $1`, j.ID)
	must(t, err)
	if _, err := f.st.CancelRun(ctx, j.ID, runkey.Scheduled(j.ID, slot.Add(-time.Second))); err != nil {
		t.Fatalf("cancel once the others were dispatched: %v", err)
	}
}
