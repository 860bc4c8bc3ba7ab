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

// backfillOutcome records the outcome of a backfill of slot under request.
func (f *fixture) backfillOutcome(j store.CronJob, slot time.Time, request string, r wire.Result) store.OutcomeResult {
	f.t.Helper()
	now := time.Now().UTC()
	started, finished := now.Add(-2*time.Second), now.Add(-time.Second)
	res, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: runkey.Backfill(j.ID, slot, request), Version: j.Version, ScheduledAt: slot, StartedAt: &started,
		FinishedAt: &finished, Result: r,
	})
	must(f.t, err)
	return res
}

// A backfill counts neither way: its success does not reset the failures
// of the slots around it, its failure adds none (it would trip an
// auto-disable at the threshold otherwise), and a redelivered report is a
// duplicate. It is recorded with trigger backfill at its slot.
func TestBackfillOutcomeCountsNeitherWay(t *testing.T) {
	f := newFixture(t)
	j := f.job(3)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(j.ID, s0)
	f.outcome(j, s0, wire.ResultExitCode)
	f.outcome(j, s0.Add(time.Minute), wire.ResultExitCode)
	if res := f.backfillOutcome(j, s0, "7", wire.ResultSuccess); res.Job.ConsecutiveFailures != 2 {
		t.Errorf("a backfill's success reset the counter: %d, want 2", res.Job.ConsecutiveFailures)
	}
	if res := f.backfillOutcome(j, s0, "8", wire.ResultExitCode); res.Job.ConsecutiveFailures != 2 || res.AutoDisabled {
		t.Errorf("a backfill's failure counted: %+v", res.Job)
	}
	if res := f.backfillOutcome(j, s0, "8", wire.ResultExitCode); !res.Duplicate {
		t.Errorf("a redelivered backfill report: %+v, want duplicate", res)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND trigger = 'backfill' AND scheduled_at = $2`, j.ID, s0); n != 2 {
		t.Errorf("%d backfill records of the slot, want 2 (one per request)", n)
	}
	if res := f.outcome(j, s0.Add(2*time.Minute), wire.ResultExitCode); !res.AutoDisabled {
		t.Errorf("the third scheduled failure did not trip: %+v", res.Job)
	}
}

// A backfill's report shows that a node has the job's schedule now, not
// at the past slot it re-ran: a sweep that had not started starts at the
// report, never at the backfilled slot (the slots in between were never
// the nodes' to run).
func TestBackfillOutcomeStartsTheSweepNow(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE cron_jobs SET swept_until = NULL WHERE id = $1`, j.ID)
	must(t, err)
	before := time.Now().UTC()
	slot := before.Truncate(time.Minute).Add(-3 * time.Hour)
	f.backfillOutcome(j, slot, "9", wire.ResultSuccess)
	var swept *time.Time
	must(t, f.st.Pool().QueryRow(context.Background(), `SELECT swept_until FROM cron_jobs WHERE id = $1`, j.ID).Scan(&swept))
	if swept == nil || swept.Before(before.Add(-time.Minute)) {
		t.Errorf("sweep starts at %v, want about now (not the backfilled slot %s)", swept, slot)
	}
}

// Store.Backfill queues a run-now task carrying the backfill's key, and
// refuses a slot that is no past fire time of the job (ErrInvalidSlot),
// queueing nothing.
func TestStoreBackfill(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE cron_jobs SET created_at = now() - interval '1 day' WHERE id = $1`, j.ID)
	must(t, err)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	_, key, err := f.st.Backfill(context.Background(), j.ID, 0, slot)
	must(t, err)
	k, err := runkey.Parse(key)
	if err != nil || k.Trigger != wire.TriggerBackfill || !k.Slot.Equal(slot) {
		t.Fatalf("key %q: %+v %v", key, k, err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now' AND run_key = $2 AND id::text = $3`, j.ID, key, k.Request); n != 1 {
		t.Errorf("%d tasks of the backfill", n)
	}
	at, ok, err := f.st.RunNowRequested(context.Background(), j.ID, k)
	if err != nil || !ok || at.IsZero() {
		t.Errorf("RunNowRequested(backfill) = %v %v %v", at, ok, err)
	}
	if _, ok, _ := f.st.RunNowRequested(context.Background(), j.ID, runkey.Key{JobID: j.ID, Trigger: wire.TriggerManual, Request: k.Request}); ok {
		t.Error("the backfill's request answers as a run-now")
	}
	tasks := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1`, j.ID)
	if _, _, err := f.st.Backfill(context.Background(), j.ID, 0, slot.Add(2*time.Hour)); !errors.Is(err, store.ErrInvalidSlot) {
		t.Errorf("future slot: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1`, j.ID); n != tasks {
		t.Errorf("a refused backfill queued %d tasks", n-tasks)
	}
}
