package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// catchUpOutcome records a catch-up's result for slot: the slot's own
// scheduled key, trigger catchup, reported long after the slot.
func (f *fixture) catchUpOutcome(j store.CronJob, slot time.Time, r wire.Result) store.OutcomeResult {
	f.t.Helper()
	started, finished := slot.Add(30*time.Minute), slot.Add(31*time.Minute)
	res, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot, StartedAt: &started,
		FinishedAt: &finished, Result: r, Trigger: wire.TriggerCatchUp,
	})
	must(f.t, err)
	return res
}

func (f *fixture) triggerOf(j store.CronJob, slot time.Time) (trigger string, result string) {
	f.t.Helper()
	must(f.t, f.st.Pool().QueryRow(context.Background(), `SELECT trigger, result FROM cron_job_runs WHERE run_key = $1`,
		runkey.Scheduled(j.ID, slot)).Scan(&trigger, &result))
	return trigger, result
}

// A catch-up's ran outcome replaces the lost record the sweeper wrote for
// its slot meanwhile: one record for the slot, which says catchup and
// counts towards failures like a scheduled run.
func TestCatchUpReplacesLostAndCounts(t *testing.T) {
	f := newFixture(t)
	j := f.job(2)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	s1 := s0.Add(time.Minute)
	f.sweepFrom(j.ID, s0.Add(time.Second))
	f.outcome(j, s0, wire.ResultExitCode)
	rep, err := f.st.SweepLostRuns(context.Background(), s1.Add(2*time.Minute+time.Second), time.Minute)
	must(t, err)
	if rep.Lost != 1 {
		t.Fatalf("sweep: %+v, want the slot %s lost", rep, s1)
	}
	if trig, res := f.triggerOf(j, s1); trig != "scheduled" || res != "lost" {
		t.Fatalf("sweeper's record: trigger %q result %q, want scheduled lost (the key's trigger)", trig, res)
	}
	res := f.catchUpOutcome(j, s1, wire.ResultExitCode)
	if !res.Replaced || res.Duplicate || !res.AutoDisabled {
		t.Fatalf("catch-up failure: %+v, want it to replace lost and be the second consecutive failure", res)
	}
	if trig, res := f.triggerOf(j, s1); trig != "catchup" || res != "exit_code" {
		t.Errorf("after the catch-up: trigger %q result %q, want catchup exit_code", trig, res)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at = $2`, j.ID, s1); n != 1 {
		t.Errorf("%d records of the slot, want 1", n)
	}
	// Another node's report of the same catch-up changes nothing.
	if again := f.catchUpOutcome(j, s1, wire.ResultSuccess); !again.Duplicate {
		t.Errorf("second catch-up result of the slot: %+v, want duplicate", again)
	}
	// The runs listing filters by the stored trigger.
	runs, _, err := f.st.PageRuns(context.Background(), j.ID, store.RunQuery{Triggers: []wire.Trigger{wire.TriggerCatchUp}, Limit: 10})
	must(t, err)
	if len(runs) != 1 || runs[0].Trigger != wire.TriggerCatchUp || !runs[0].ScheduledAt.Equal(s1) {
		t.Errorf("runs with trigger catchup: %+v", runs)
	}
}

// A new run's record says catchup when its node says so; the database
// refuses catchup on any key but a scheduled one, whoever writes it.
func TestTriggerColumn(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	f.catchUpOutcome(j, slot, wire.ResultSuccess)
	if trig, _ := f.triggerOf(j, slot); trig != "catchup" {
		t.Errorf("inserted catch-up: trigger %q", trig)
	}
	f.outcome(j, slot.Add(time.Minute), wire.ResultSuccess)
	if trig, _ := f.triggerOf(j, slot.Add(time.Minute)); trig != "scheduled" {
		t.Errorf("scheduled run: trigger %q", trig)
	}
	ctx := context.Background()
	_, err := f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, trigger)
		VALUES ($1, $2, 1, now(), 'success', 'catchup')`, runkey.Manual(j.ID, "req-1"), j.ID)
	if err == nil {
		t.Error("a manual key was stored with trigger catchup")
	}
	_, err = f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, trigger)
		VALUES ($1, $2, 1, $3, 'success', 'manual')`, runkey.Scheduled(j.ID, slot.Add(2*time.Minute)), j.ID, slot.Add(2*time.Minute))
	if err == nil {
		t.Error("a scheduled key was stored with trigger manual")
	}
}

// The window is stored with the job and reaches the nodes.
func TestCatchUpWindowStoredAndSent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "0 * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, CatchUpWindowSeconds: 1800}, nil)
	must(t, err)
	if got := f.get(j.ID).CatchUpWindowSeconds; got != 1800 {
		t.Errorf("stored window %d, want 1800", got)
	}
	d, _, err := f.st.DesiredJob(ctx, j.ID)
	must(t, err)
	if d.CatchUpWindowSec != 1800 {
		t.Errorf("desired window %d, want 1800", d.CatchUpWindowSec)
	}
}
