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

// deleteFully deletes a job as the API and its delete workflow do: the
// mark, then the row once the units are gone.
func (f *fixture) deleteFully(id string) store.CronJob {
	f.t.Helper()
	ctx := context.Background()
	del, err := f.st.DeleteJob(ctx, id, 0)
	must(f.t, err)
	must(f.t, f.st.FinishDelete(ctx, id))
	return del
}

// A finished delete removes the job but leaves its runs, its audit trail
// and a tombstone naming its tenant; its starts go (it runs nowhere).
func TestFinishDeleteKeepsRunsUnderATombstone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(5)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(j, s0, wire.ResultSuccess)
	f.outcome(j, s0.Add(time.Minute), wire.ResultExitCode)
	_, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: runkey.Scheduled(j.ID, s0.Add(2*time.Minute)),
		Version: j.Version, ScheduledAt: s0.Add(2 * time.Minute), StartedAt: s0.Add(2 * time.Minute)})
	must(t, err)

	del := f.deleteFully(j.ID)

	if _, err := f.st.GetJob(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetJob after the delete: %v, want ErrNotFound", err)
	}
	d, err := f.st.GetDeletedJob(ctx, j.ID)
	must(t, err)
	if d.ID != j.ID || d.TenantID != f.tenant || d.Version != del.Version || !d.CreatedAt.Equal(j.CreatedAt) ||
		time.Since(d.DeletedAt) > time.Minute {
		t.Errorf("tombstone %+v; want the job's id, tenant, delete version %d and a deleted_at of now", d, del.Version)
	}
	runs, err := f.st.ListRuns(ctx, j.ID, 10)
	must(t, err)
	if len(runs) != 2 || runs[0].Result != wire.ResultExitCode || runs[1].Result != wire.ResultSuccess {
		t.Errorf("runs after the delete: %+v; want the two recorded", runs)
	}
	if _, err := f.st.GetRun(ctx, j.ID, 0, runkey.Scheduled(j.ID, s0)); err != nil {
		t.Errorf("a run by key after the delete: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_run_starts WHERE cron_job_id = $1`, j.ID); n != 0 {
		t.Errorf("%d starts of the deleted job left", n)
	}
	if running, err := f.st.RunningRuns(ctx, j.ID); err != nil || len(running) != 0 {
		t.Errorf("running runs of a deleted job: %v %v", running, err)
	}
	events, err := f.st.ListJobEvents(ctx, j.ID, 0, 10)
	must(t, err)
	if len(events) == 0 || events[0].Action != "deleted" {
		t.Errorf("newest event %+v; want deleted", events)
	}
	// A second finish (a retried activity) changes nothing.
	must(t, f.st.FinishDelete(ctx, j.ID))
	if n := f.count(`SELECT count(*) FROM deleted_cron_jobs WHERE id = $1`, j.ID); n != 1 {
		t.Errorf("%d tombstones after a repeated finish, want 1", n)
	}
	// An id nobody deleted has no tombstone.
	if _, err := f.st.GetDeletedJob(ctx, "00000000-0000-4000-8000-000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetDeletedJob of an unknown id: %v, want ErrNotFound", err)
	}
}

// An outcome that arrives after the delete finished (a partitioned node,
// a spooled report) joins the deleted job's history, idempotently, held to
// the rules of a live job's: the node's shard, no version above the
// job's last, a real result replacing a placeholder. Nothing acts on it.
func TestLateOutcomeOfDeletedJobIsRecorded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(1)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(j.ID, s0.Add(-time.Minute+time.Second))
	// The sweeper recorded s0 lost while the node was partitioned.
	_, err := f.st.SweepLostRuns(ctx, s0.Add(2*time.Minute+30*time.Second), time.Minute)
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 1 ||
		f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = $1 AND result = 'lost'`, runkey.Scheduled(j.ID, s0)) != 1 {
		t.Fatalf("%d records; want one, s0 lost", n)
	}
	del := f.deleteFully(j.ID)

	late := func(slot time.Time, version int64, r wire.Result, node store.Node) (store.OutcomeResult, error) {
		started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
		return f.st.RecordOutcome(ctx, node, j.ID, store.Outcome{RunKey: runkey.Scheduled(j.ID, slot), Version: version,
			ScheduledAt: slot, StartedAt: &started, FinishedAt: &finished, Result: r})
	}
	res, err := late(s0, j.Version, wire.ResultExitCode, f.node)
	must(t, err)
	if !res.Deleted || res.Duplicate || !res.Replaced || res.AutoDisabled {
		t.Errorf("late failure replacing the lost record: %+v; want deleted, replaced, nothing tripped", res)
	}
	res, err = late(s0.Add(time.Minute), del.Version, wire.ResultSuccess, f.node)
	must(t, err)
	if !res.Deleted || res.Duplicate || res.Replaced {
		t.Errorf("late new run: %+v; want deleted, inserted", res)
	}
	if res, err = late(s0.Add(time.Minute), del.Version, wire.ResultSuccess, f.node); err != nil || !res.Duplicate {
		t.Errorf("redelivered late outcome: %+v %v; want a duplicate", res, err)
	}
	if _, err := late(s0.Add(2*time.Minute), del.Version+1, wire.ResultSuccess, f.node); !errors.Is(err, store.ErrVersionAhead) {
		t.Errorf("late outcome above the deleted job's version: %v, want ErrVersionAhead", err)
	}
	sh, err := f.st.CreateShard(ctx, "web-2", "/srv/shared/www2")
	must(t, err)
	stranger, _, err := f.st.CreateNode(ctx, sh.ID, "node9")
	must(t, err)
	if _, err := late(s0.Add(2*time.Minute), del.Version, wire.ResultSuccess, stranger); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("late outcome from another shard's node: %v, want ErrNotFound", err)
	}
	runs, err := f.st.ListRuns(ctx, j.ID, 10)
	must(t, err)
	if len(runs) != 2 || runs[0].Result != wire.ResultSuccess || runs[1].Result != wire.ResultExitCode {
		t.Errorf("history after the late outcomes: %+v; want s0 exit_code (replacing lost) and s1 success", runs)
	}
	if n := f.count(`SELECT count(*) FROM cron_jobs WHERE id = $1`, j.ID); n != 0 {
		t.Errorf("a late outcome brought the job's row back")
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = $2`, j.ID, wire.ActionAutoDisable); n != 0 {
		t.Errorf("a late failure of a deleted job queued %d auto-disables", n)
	}
}

// Retention prunes a deleted job's runs with everyone's, and its tombstone
// once it is older than the retention and no run of it is left; a run
// recorded after the delete keeps its tombstone until it goes too.
func TestRetentionPrunesDeletedJobHistory(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old, lateRun, recent := f.job(5), f.job(5), f.job(5)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for _, j := range []store.CronJob{old, lateRun, recent} {
		f.outcome(j, slot, wire.ResultSuccess)
		f.deleteFully(j.ID)
	}
	// old and lateRun were deleted 200 days ago with all their runs; a
	// report of lateRun's arrived just now.
	_, err := f.st.Pool().Exec(ctx, `UPDATE deleted_cron_jobs SET deleted_at = now() - interval '200 days' WHERE id = ANY($1::uuid[])`,
		[]string{old.ID, lateRun.ID})
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_job_runs SET received_at = now() - interval '200 days' WHERE cron_job_id = ANY($1::uuid[])`,
		[]string{old.ID, lateRun.ID})
	must(t, err)
	late := slot.Add(time.Minute)
	res := f.outcome(lateRun, late, wire.ResultSuccess)
	if !res.Deleted {
		t.Fatalf("late outcome: %+v, want recorded under the tombstone", res)
	}

	n, err := f.st.DeleteRunsBefore(ctx, time.Now().Add(-180*24*time.Hour))
	must(t, err)
	if n != 2 {
		t.Errorf("retention removed %d runs, want 2 (old's and lateRun's first)", n)
	}
	for _, c := range []struct {
		job       store.CronJob
		runs      int
		tombstone bool
	}{
		{old, 0, false},    // nothing left of it
		{lateRun, 1, true}, // its late run keeps its owner
		{recent, 1, true},  // within the retention
	} {
		if got := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, c.job.ID); got != c.runs {
			t.Errorf("job %s: %d runs left, want %d", c.job.ID, got, c.runs)
		}
		_, err := f.st.GetDeletedJob(ctx, c.job.ID)
		if kept := err == nil; kept != c.tombstone {
			t.Errorf("job %s: tombstone kept %v (%v), want %v", c.job.ID, kept, err, c.tombstone)
		}
	}
}
