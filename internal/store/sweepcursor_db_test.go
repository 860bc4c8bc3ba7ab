package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// The outcome of a job's next slot after the sweep's cursor moves the
// cursor over it (and sweep_due_at to the end of the slot after), in the
// batched path too; an outcome past an unreported slot, a late one or a
// redelivery does not; the pass then records exactly the unreported slot
// lost, and its late outcome does not move the cursor back.
func TestOutcomeMovesTheSweepCursor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	const timeout, grace = time.Minute, time.Minute
	base := time.Now().UTC().Truncate(time.Minute).Add(-30*time.Minute + 10*time.Second)
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, j.ID, base)
	must(t, err)
	slot := func(i int) time.Time { return base.Truncate(time.Minute).Add(time.Duration(i+1) * time.Minute) }
	expect := func(step string, sweptTo, dueAt time.Time) {
		t.Helper()
		swept, due := f.sweepState(j.ID)
		if swept == nil || !swept.Equal(sweptTo) || due == nil || !due.Equal(dueAt) {
			t.Fatalf("%s: swept_until %v, sweep_due_at %v; want %v, %v", step, swept, due, sweptTo, dueAt)
		}
	}
	outcome := func(i int) store.OutcomeRequest {
		s := slot(i)
		started, finished := s.Add(time.Second), s.Add(2*time.Second)
		return store.OutcomeRequest{Node: f.node, JobID: j.ID, Outcome: store.Outcome{RunKey: runkey.Scheduled(j.ID, s),
			Version: j.Version, ScheduledAt: s, StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess}}
	}

	f.outcome(j, slot(0), wire.ResultSuccess)
	expect("the next slot reported", slot(0), slot(1).Add(timeout))
	// Two slots in one batch, in order: each moves it on.
	for i, a := range f.st.RecordOutcomes(ctx, []store.OutcomeRequest{outcome(1), outcome(2)}) {
		must(t, a.Err)
		if a.Result.Duplicate {
			t.Fatalf("batch outcome %d: duplicate", i)
		}
	}
	expect("two slots in one batch", slot(2), slot(3).Add(timeout))
	// Slot 3 never reported: slot 4's outcome leaves the cursor before 3.
	f.outcome(j, slot(4), wire.ResultSuccess)
	expect("a slot past an unreported one", slot(2), slot(3).Add(timeout))
	before := f.rowVersion(j.ID)
	if res := f.outcome(j, slot(2), wire.ResultSuccess); !res.Duplicate {
		t.Fatal("redelivery not a duplicate")
	}
	if f.rowVersion(j.ID) != before {
		t.Error("a redelivery wrote the job")
	}

	// The pass once slot 4 is a grace period past its end: slot 3 lost,
	// slot 4 kept (it has a run).
	now := slot(4).Add(timeout + grace + time.Second)
	rep, err := f.st.SweepLostRuns(ctx, now, grace)
	must(t, err)
	if rep.Lost != 1 {
		t.Fatalf("lost %d, want 1 (slot 3)", rep.Lost)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost' AND scheduled_at = $2`, j.ID, slot(3)); n != 1 {
		t.Fatalf("slot 3 lost records: %d", n)
	}
	swept, _ := f.sweepState(j.ID)
	// Slot 3's outcome arrives late: it replaces the lost record, the
	// cursor stays where the pass put it.
	if res := f.outcome(j, slot(3), wire.ResultSuccess); !res.Replaced {
		t.Fatal("late outcome did not replace the lost record")
	}
	if s, _ := f.sweepState(j.ID); s == nil || !s.Equal(*swept) {
		t.Fatalf("late outcome moved the cursor from %v to %v", swept, s)
	}
	// And the next slot after the pass's cursor moves it again.
	f.outcome(j, slot(5), wire.ResultSuccess)
	expect("the next slot after the pass", slot(5), slot(6).Add(timeout))
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost'`, j.ID); n != 0 {
		t.Fatalf("%d lost records left", n)
	}
}

// A job the sweep does not look at (disabled) keeps its cursor: an
// outcome of a run still in flight when it was disabled must not give it
// a due time, or every pass would list it and find no row to sweep.
func TestOutcomeLeavesADisabledJobsCursor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	base := time.Now().UTC().Truncate(time.Minute).Add(-30*time.Minute + 10*time.Second)
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, j.ID, base)
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET enabled = false WHERE id = $1`, j.ID)
	must(t, err)
	sweptBefore, dueBefore := f.sweepState(j.ID)
	f.outcome(j, base.Truncate(time.Minute).Add(time.Minute), wire.ResultSuccess)
	swept, due := f.sweepState(j.ID)
	if !sameTime(swept, sweptBefore) || !sameTime(due, dueBefore) {
		t.Fatalf("disabled job's cursor moved: swept_until %v -> %v, sweep_due_at %v -> %v", sweptBefore, swept, dueBefore, due)
	}
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
