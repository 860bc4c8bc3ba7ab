package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// retryJob creates an active daily job (midnight UTC) with retries and
// maxFailures: its slot today is always a day from the next.
func (f *fixture) retryJob(retries, maxFailures int) store.CronJob {
	f.t.Helper()
	j, _, err := f.st.CreateJob(context.Background(), f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "0 0 * * *", Timezone: "UTC",
		Command: "false", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: maxFailures,
		Retries: retries, RetryDelaySeconds: 30}, nil)
	must(f.t, err)
	f.activate(j.ID)
	return f.get(j.ID)
}

// attempt records the outcome of a run of j under key at slot.
func (f *fixture) attempt(j store.CronJob, key string, slot time.Time, r wire.Result) store.OutcomeResult {
	f.t.Helper()
	now := time.Now().UTC()
	started, finished := now.Add(-2*time.Second), now.Add(-time.Second)
	res, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: key, Version: j.Version, ScheduledAt: slot, StartedAt: &started, FinishedAt: &finished, Result: r,
	})
	must(f.t, err)
	return res
}

// retryTasks are the job's queued retries: key to not_before.
func (f *fixture) retryTasks(id string) map[string]time.Time {
	f.t.Helper()
	rows, err := f.st.Pool().Query(context.Background(), `SELECT run_key, not_before FROM cron_job_tasks
		WHERE cron_job_id = $1 AND action = 'run_now' AND run_key LIKE '%#retry#%'`, id)
	must(f.t, err)
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var k string
		var at time.Time
		must(f.t, rows.Scan(&k, &at))
		out[k] = at
	}
	must(f.t, rows.Err())
	return out
}

// A slot that fails twice and then succeeds with retries=3: attempts 1, 2
// and 3 are runs of their own with the same slot, each failure queues the
// next attempt once (a redelivered outcome queues nothing more), with the
// delay doubled, and no failure counts: the slot's last attempt succeeded.
func TestRetriesFailTwiceThenSucceed(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(3, 2)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	before := time.Now()

	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.Job.ConsecutiveFailures != 0 || res.AutoDisabled {
		t.Fatalf("attempt 1 with a retry queued counted: %+v", res.Job)
	}
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); !res.Duplicate {
		t.Fatalf("redelivered attempt 1: %+v", res)
	}
	tasks := f.retryTasks(j.ID)
	due2, ok := tasks[runkey.Retry(j.ID, slot, 2)]
	if len(tasks) != 1 || !ok || due2.Before(before.Add(30*time.Second)) || due2.After(time.Now().Add(31*time.Second)) {
		t.Fatalf("retry tasks %v: want attempt 2, due 30 s after the failure", tasks)
	}
	before = time.Now()
	if res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultTimeout); res.Job.ConsecutiveFailures != 0 || res.AutoDisabled {
		t.Fatalf("attempt 2 with a retry queued counted: %+v", res.Job)
	}
	tasks = f.retryTasks(j.ID)
	due3, ok := tasks[runkey.Retry(j.ID, slot, 3)]
	if len(tasks) != 2 || !ok || due3.Before(before.Add(time.Minute)) || due3.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("retry tasks %v: want attempt 3, due 60 s after attempt 2's failure", tasks)
	}
	res := f.attempt(j, runkey.Retry(j.ID, slot, 3), slot, wire.ResultSuccess)
	if res.Job.ConsecutiveFailures != 0 || len(f.retryTasks(j.ID)) != 2 {
		t.Fatalf("after the success: %+v, tasks %v", res.Job, f.retryTasks(j.ID))
	}
	rows, err := f.st.Pool().Query(context.Background(), `SELECT attempt, trigger, result FROM cron_job_runs
		WHERE cron_job_id = $1 AND scheduled_at = $2 ORDER BY attempt`, j.ID, slot)
	must(t, err)
	var got []string
	for rows.Next() {
		var a int
		var trig, result string
		must(t, rows.Scan(&a, &trig, &result))
		got = append(got, trig+"/"+result+"/"+string(rune('0'+a)))
	}
	rows.Close()
	want := []string{"scheduled/exit_code/1", "retry/timeout/2", "retry/success/3"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("runs of the slot %v, want %v", got, want)
	}
}

// Only the last attempt counts: a slot whose every attempt failed counts
// once, so max_failures 1 disables the job at the last attempt, not at
// the first (which would stop its retries).
func TestOnlyTheLastAttemptCounts(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(1, 1)
	f.target(f.tenant, nil, "run_failed", "auto_disabled")
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.AutoDisabled || res.Job.ConsecutiveFailures != 0 ||
		res.Retry != runkey.Retry(j.ID, slot, 2) {
		t.Fatalf("attempt 1 disabled the job or queued no retry: %+v", res)
	}
	// A failed attempt with a retry queued notifies nothing; the last does.
	if n := f.count(`SELECT count(*) FROM notification_events WHERE cron_job_id = $1`, j.ID); n != 0 {
		t.Errorf("attempt 1 emitted %d notification events", n)
	}
	res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultExitCode)
	if !res.AutoDisabled || res.Job.ConsecutiveFailures != 1 || res.Retry != "" {
		t.Fatalf("the last attempt's failure: %+v, want 1 failure, auto-disabled, no retry", res)
	}
	if n := f.count(`SELECT count(*) FROM notification_events WHERE cron_job_id = $1 AND kind IN ('run_failed', 'auto_disabled')`, j.ID); n != 2 {
		t.Errorf("the last attempt emitted %d run_failed/auto_disabled events, want 2", n)
	}
	if tasks := f.retryTasks(j.ID); len(tasks) != 1 {
		t.Errorf("retry tasks %v: the last attempt queues none", tasks)
	}
}

// No retry is made: for a platform error (never the tenant's), a run-now,
// a failure whose retry would start after the next slot (an outcome that
// arrives late), or an attempt of a version the job has left.
func TestNoRetry(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(3, 0)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultPlatformError)
	f.attempt(j, runkey.Manual(j.ID, "5"), time.Now().UTC(), wire.ResultExitCode)
	old := slot.Add(-24 * time.Hour) // yesterday's: its next slot (today's) has come
	if res := f.attempt(j, runkey.Scheduled(j.ID, old), old, wire.ResultExitCode); res.Job.ConsecutiveFailures != 2 {
		t.Errorf("a late failure not retried must count: %+v", res.Job) // the run-now's and this one
	}
	changed, err := f.st.UpdateJob(context.Background(), j.ID, 0, func(fl store.JobFields) (store.JobFields, error) {
		fl.Command = "true"
		return fl, nil
	})
	must(t, err)
	f.activate(j.ID)
	// Today's slot, run by the old version on a node that had not yet
	// taken the change: its failure replaces the other node's platform
	// error, and is not retried.
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); !res.Replaced {
		t.Fatalf("the old version's failure: %+v, want it to replace the platform error", res)
	}
	if changed.Version == j.Version {
		t.Fatal("the update kept the version")
	}
	if tasks := f.retryTasks(j.ID); len(tasks) != 0 {
		t.Errorf("retry tasks %v, want none", tasks)
	}
}

// A retry that never reports (its job changed before it was sent, the
// runner refused it past the next slot, its node died) leaves its failed
// attempt as the slot's last: the sweep makes it count again once the
// retry was due + timeout + grace ago, and a later report of the retry
// supersedes it after all.
func TestDroppedRetryCountsAgain(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(2, 0)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode)
	ctx := context.Background()
	if n, err := f.st.ResolveDroppedRetries(ctx, time.Now(), store.RetryGrace); err != nil || n != 0 {
		t.Fatalf("resolved %d (%v) before the retry was due", n, err)
	}
	n, err := f.st.ResolveDroppedRetries(ctx, time.Now().Add(time.Minute+store.RetryGrace+2*time.Minute), store.RetryGrace)
	if err != nil || n != 1 {
		t.Fatalf("resolved %d (%v), want the one dropped retry", n, err)
	}
	next := slot.Add(-24 * time.Hour) // an older slot's report recounts
	if res := f.attempt(j, runkey.Scheduled(j.ID, next), next, wire.ResultSuccess); res.Job.ConsecutiveFailures != 1 {
		t.Errorf("after the resolve: %d failures, want the dropped retry's failed attempt", res.Job.ConsecutiveFailures)
	}
	// The retry reports after all, late: the attempt before is superseded.
	if res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess); res.Job.ConsecutiveFailures != 0 {
		t.Errorf("after the late retry's success: %d failures, want 0", res.Job.ConsecutiveFailures)
	}
}

// A delayed retry waits in the outbox without holding up the job's later
// changes: a disable queued after it goes out first; the retry goes once
// due.
func TestDelayedRetryDoesNotBlockTheJob(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(1, 0)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	ctx := context.Background()
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_job_tasks SET dispatched_at = now() WHERE cron_job_id = $1`, j.ID)
	must(t, err)
	f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode)
	_, err = f.st.DisableJob(ctx, j.ID, 0)
	must(t, err)
	tasks, err := f.st.ClaimTasks(ctx, 100, time.Minute)
	must(t, err)
	if len(tasks) != 1 || tasks[0].Action != wire.ActionDisable {
		t.Fatalf("claimed %+v, want the disable alone", tasks)
	}
	must(t, f.st.MarkDispatched(ctx, tasks[0].ID))
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_job_tasks SET not_before = now() - interval '1 second' WHERE cron_job_id = $1 AND run_key <> ''`, j.ID)
	must(t, err)
	tasks, err = f.st.ClaimTasks(ctx, 100, time.Minute)
	must(t, err)
	if len(tasks) != 1 || tasks[0].RunKey != runkey.Retry(j.ID, slot, 2) {
		t.Fatalf("claimed %+v once due, want the retry", tasks)
	}
}

// The core dies (here: its statement fails) between recording a failed
// attempt and queueing its retry: both are one transaction, so neither
// stands, and the node's redelivery (its spool) records the failure and
// queues the retry, once.
func TestRetryIsQueuedWithItsFailureOrNotAtAll(t *testing.T) {
	f := newFixture(t)
	j := f.retryJob(2, 0)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	ctx := context.Background()
	_, err := f.st.Pool().Exec(ctx, `
		CREATE FUNCTION fail_retry_task() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected: the core died'; END $$;
		CREATE TRIGGER fail_retry_task BEFORE INSERT ON cron_job_tasks
			FOR EACH ROW WHEN (NEW.run_key LIKE '%#retry#%') EXECUTE FUNCTION fail_retry_task();`)
	must(t, err)
	now := time.Now().UTC()
	o := store.Outcome{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot, StartedAt: &now, FinishedAt: &now,
		Result: wire.ResultExitCode}
	if _, err := f.st.RecordOutcome(ctx, f.node, j.ID, o); err == nil {
		t.Fatal("the injected failure did not fail the recording")
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 0 {
		t.Fatalf("%d runs recorded without their retry", n)
	}
	_, err = f.st.Pool().Exec(ctx, `DROP TRIGGER fail_retry_task ON cron_job_tasks`)
	must(t, err)
	for range 2 { // the spool redelivers, twice
		if _, err := f.st.RecordOutcome(ctx, f.node, j.ID, o); err != nil {
			t.Fatal(err)
		}
	}
	if tasks := f.retryTasks(j.ID); len(tasks) != 1 {
		t.Errorf("retry tasks %v, want one", tasks)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND superseded`, j.ID); n != 1 {
		t.Errorf("%d superseded runs, want the failed attempt", n)
	}
}

// droppedAttemptTripped is review s20a's job: retries 1, max_failures 2.
// Attempt 1 of today's slot failed; its retry ran on a node cut off from
// the core, so the housekeeper made attempt 1 count again; a run-now's
// failure then tripped the auto-disable. It returns the job as created
// (its version is the one the retry ran) and the slot.
func (f *fixture) droppedAttemptTripped() (store.CronJob, time.Time) {
	f.t.Helper()
	j := f.retryJob(1, 2) // daily at 00:00, 1 retry, max_failures 2
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	// Attempt 1 fails: a retry is queued, nothing counts yet.
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.Retry == "" || res.Job.ConsecutiveFailures != 0 {
		f.t.Fatalf("attempt 1: %+v", res)
	}
	// The retry ran on a node cut off from the core: no report yet when
	// the housekeeper looks.
	n, err := f.st.ResolveDroppedRetries(context.Background(), time.Now().Add(time.Minute+store.RetryGrace+2*time.Minute), store.RetryGrace)
	if err != nil || n != 1 {
		f.t.Fatalf("resolved %d (%v)", n, err)
	}
	// The job's next counted run fails (a run-now here): attempt 1 + it = 2.
	if res := f.attempt(j, runkey.Manual(j.ID, "7"), time.Now().UTC(), wire.ResultExitCode); !res.AutoDisabled {
		f.t.Fatalf("precondition: the next failure should trip max_failures 2 with the resolved attempt: %+v", res.Job)
	}
	return j, slot
}

// Review s20a, finding 1. A retry ran and succeeded, but its node was cut
// off from the core API (its report spooled) for longer than the retry's
// due time + timeout + RetryGrace. The housekeeper then makes the failed
// attempt before it count again (ResolveDroppedRetries), and the job's
// next failure trips max_failures. When the spooled success arrives, it
// supersedes the attempt again and the recount falls below max_failures,
// but the auto-disable stayed: only a *replaced* record lifted one, and
// the late retry's record is an insert. A retry's success now corrects
// the history as a replacement does (correctsHistory).
// A late real result that replaces a lost record does lift (see
// TestLateOutcomeReplacingLostRecountsAndLifts); this one must too: the
// job was auto-disabled by a count its own history no longer supports,
// because of a delivery delay (a platform fault). The report redelivered
// changes nothing more.
func TestLateRetrySuccessLiftsTheAutoDisableItsDroppedAttemptCaused(t *testing.T) {
	f := newFixture(t)
	j, slot := f.droppedAttemptTripped()
	// The partition heals: the retry's success arrives.
	res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess)
	got := f.get(j.ID)
	if got.ConsecutiveFailures != 1 {
		t.Fatalf("after the late retry success: %d failures, want 1 (the run-now's)", got.ConsecutiveFailures)
	}
	if got.Status == wire.StatusAutoDisabled || !got.Enabled || !res.Reenabled {
		t.Errorf("job stays %s (enabled %v, reenabled %v) with %d consecutive failures < max_failures %d: the auto-disable a delayed report caused is never lifted",
			got.Status, got.Enabled, res.Reenabled, got.ConsecutiveFailures, got.MaxFailures)
	}
	lifted := `SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1 AND action = 'auto_disable_lifted'`
	enables := `SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'enable'`
	if n, m := f.count(lifted, j.ID), f.count(enables, j.ID); n != 1 || m != 1 {
		t.Errorf("%d lift events, %d enable tasks; want 1 each", n, m)
	}
	// The same report again (a redelivery): a duplicate, nothing more.
	if again := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess); !again.Duplicate || again.Reenabled {
		t.Errorf("redelivered late success: %+v, want a duplicate", again)
	}
	if n, m := f.count(lifted, j.ID), f.count(enables, j.ID); n != 1 || m != 1 || f.get(j.ID).Version != got.Version {
		t.Errorf("after the redelivery: %d lift events, %d enable tasks, version %d (was %d)", n, m, f.get(j.ID).Version, got.Version)
	}
}

// A late retry report lifts an auto-disable only as a replacement would:
// when it broke the streak (a success) and the count is now below
// max_failures, and only an auto-disable. A late failure supersedes the attempt but counts itself;
// a failure since, a tenant's disable, enable or delete, or a raised
// threshold with nothing corrected leave the job as they made it.
func TestLateRetryReportLiftsOnlyAnAutoDisableItBrokeTheStreakOf(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		before func(f *fixture, j store.CronJob) // between the trip and the late report
		result wire.Result                       // the late retry's
		check  func(t *testing.T, res store.OutcomeResult, got store.CronJob)
	}{
		{"a late failure does not lift", nil, wire.ResultExitCode,
			func(t *testing.T, res store.OutcomeResult, got store.CronJob) {
				if res.Reenabled || got.Status != wire.StatusAutoDisabled || got.ConsecutiveFailures != 2 {
					t.Errorf("%s, %d failures, reenabled %v; want auto_disabled at 2", got.Status, got.ConsecutiveFailures, res.Reenabled)
				}
			}},
		{"a failure since keeps the count at the threshold", func(f *fixture, j store.CronJob) {
			f.attempt(j, runkey.Manual(j.ID, "8"), time.Now().UTC(), wire.ResultExitCode)
		}, wire.ResultSuccess,
			func(t *testing.T, res store.OutcomeResult, got store.CronJob) {
				if res.Reenabled || got.Status != wire.StatusAutoDisabled || got.ConsecutiveFailures != 2 {
					t.Errorf("%s, %d failures, reenabled %v; want auto_disabled at 2", got.Status, got.ConsecutiveFailures, res.Reenabled)
				}
			}},
		{"a tenant's disable stays", func(f *fixture, j store.CronJob) {
			_, err := f.st.DisableJob(ctx, j.ID, 0)
			must(f.t, err)
		}, wire.ResultSuccess,
			func(t *testing.T, res store.OutcomeResult, got store.CronJob) {
				// Pending until the nodes confirm the disable; not enabled.
				if res.Reenabled || got.Enabled || got.Status == wire.StatusAutoDisabled {
					t.Errorf("%s (enabled %v, reenabled %v); want the tenant's disable", got.Status, got.Enabled, res.Reenabled)
				}
			}},
		{"a tenant's enable is not lifted again", func(f *fixture, j store.CronJob) {
			_, err := f.st.EnableJob(ctx, j.ID, 0)
			must(f.t, err)
		}, wire.ResultSuccess,
			func(t *testing.T, res store.OutcomeResult, got store.CronJob) {
				if res.Reenabled || !got.Enabled || got.ConsecutiveFailures != 0 {
					t.Errorf("%s (enabled %v, reenabled %v), %d failures; want the tenant's enable, 0", got.Status, got.Enabled, res.Reenabled, got.ConsecutiveFailures)
				}
			}},
		{"a raised threshold with a late failure stays disabled", func(f *fixture, j store.CronJob) {
			_, err := f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.MaxFailures = 5; return x, nil })
			must(f.t, err)
		}, wire.ResultExitCode,
			func(t *testing.T, res store.OutcomeResult, got store.CronJob) {
				if res.Reenabled || got.Status != wire.StatusAutoDisabled {
					t.Errorf("%s (reenabled %v), %d failures of %d; a raised threshold alone must not lift", got.Status, res.Reenabled, got.ConsecutiveFailures, got.MaxFailures)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			j, slot := f.droppedAttemptTripped()
			if tc.before != nil {
				tc.before(f, j)
			}
			res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, tc.result)
			tc.check(t, res, f.get(j.ID))
			if n := f.count(`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1 AND action = 'auto_disable_lifted'`, j.ID); n != 0 {
				t.Errorf("%d lift events, want none", n)
			}
		})
	}
	// Deleted meanwhile: the report is recorded under the tombstone.
	t.Run("a deleted job", func(t *testing.T) {
		f := newFixture(t)
		j, slot := f.droppedAttemptTripped()
		f.deleteFully(j.ID)
		if res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess); !res.Deleted || res.Reenabled {
			t.Errorf("late success of a deleted job: %+v", res)
		}
	})
}

// Whether a retry's late success lifts the auto-disable is decided by the
// history alone: not by whether the housekeeper counted the attempt again
// before the trip, after it or not at all, not by the order in which a
// partition's spooled reports arrive, nor by a threshold raised
// meanwhile (reviews s20c and s20d found each of these deciding under
// earlier rules). The job: retries 1, max_failures 2; a run-now an hour
// before the slot fails, the slot's attempt 1 fails (its retry queued),
// a run-now after it fails and trips the job (2). Delivered at once, the
// retry's success would have broken that streak: 1, never a trip.
func TestLateRetrySuccessLiftsWhateverTheHousekeeperAndTheOrder(t *testing.T) {
	ctx := context.Background()
	resolve := func(f *fixture) {
		if n, err := f.st.ResolveDroppedRetries(ctx, time.Now().Add(time.Minute+store.RetryGrace+2*time.Minute), store.RetryGrace); err != nil || n != 1 {
			f.t.Fatalf("resolved %d (%v)", n, err)
		}
	}
	for _, tc := range []struct {
		name         string
		resolveFirst bool // the housekeeper, before the trip
		resolveAfter bool // after it
		earlyLate    bool // the early run-now's failure is spooled too, and comes first
		raiseTo      *int // max_failures raised while the job stands disabled
	}{
		{name: "never resolved"},
		{name: "resolved after the trip", resolveAfter: true},
		{name: "resolved before the trip", resolveFirst: true},
		{name: "resolved before the trip, the early failure spooled and delivered first", resolveFirst: true, earlyLate: true},
		{name: "never resolved, threshold raised to 3", raiseTo: ptr(3)},
		{name: "resolved after the trip, threshold raised to 3", resolveAfter: true, raiseTo: ptr(3)},
		{name: "never resolved, threshold 0 (never)", raiseTo: ptr(0)},
		{name: "resolved after the trip, threshold 0 (never)", resolveAfter: true, raiseTo: ptr(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			j := f.retryJob(1, 2)
			slot := time.Now().UTC().Truncate(24 * time.Hour)
			early := runkey.Manual(j.ID, "5")
			if !tc.earlyLate {
				f.attempt(j, early, slot.Add(-time.Hour), wire.ResultExitCode)
			}
			if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.Retry == "" {
				t.Fatalf("attempt 1: %+v", res)
			}
			if tc.resolveFirst {
				resolve(f)
			}
			if res := f.attempt(j, runkey.Manual(j.ID, "6"), time.Now().UTC(), wire.ResultExitCode); !res.AutoDisabled {
				t.Fatalf("precondition: the trip: %+v", res.Job)
			}
			if tc.resolveAfter {
				resolve(f)
			}
			if tc.raiseTo != nil {
				if _, err := f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.MaxFailures = *tc.raiseTo; return x, nil }); err != nil {
					t.Fatal(err)
				}
			}
			if tc.earlyLate {
				f.attempt(j, early, slot.Add(-time.Hour), wire.ResultExitCode)
			}
			res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess)
			got := f.get(j.ID)
			if !res.Reenabled || got.Status == wire.StatusAutoDisabled || !got.Enabled || got.ConsecutiveFailures != 1 {
				t.Errorf("%s (enabled %v, reenabled %v), %d failures; want lifted with 1 (the run-now after the slot)",
					got.Status, got.Enabled, res.Reenabled, got.ConsecutiveFailures)
			}
		})
	}
	// The other order: the retry's success first lifts; the early failure
	// after it, broken by that success, trips nothing.
	t.Run("resolved before the trip, the retry's success delivered first", func(t *testing.T) {
		f := newFixture(t)
		j := f.retryJob(1, 2)
		slot := time.Now().UTC().Truncate(24 * time.Hour)
		f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode)
		resolve(f)
		if res := f.attempt(j, runkey.Manual(j.ID, "6"), time.Now().UTC(), wire.ResultExitCode); !res.AutoDisabled {
			t.Fatalf("precondition: the trip: %+v", res.Job)
		}
		if res := f.attempt(j, runkey.Retry(j.ID, slot, 2), slot, wire.ResultSuccess); !res.Reenabled {
			t.Fatalf("the retry's success did not lift: %+v", res.Job)
		}
		res := f.attempt(j, runkey.Manual(j.ID, "5"), slot.Add(-time.Hour), wire.ResultExitCode)
		if got := f.get(j.ID); res.AutoDisabled || got.Status == wire.StatusAutoDisabled || got.ConsecutiveFailures != 1 {
			t.Errorf("the early failure after the lift: %s, %d failures, tripped %v; want 1, no trip", got.Status, got.ConsecutiveFailures, res.AutoDisabled)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// A success under a retry key the core never queued (a job without
// retries; an attempt past 1+retries: a forged record, a confused node)
// settles no attempt, so it corrects nothing and lifts no auto-disable the
// job's real history supports (review s20e).
func TestRetrySuccessNoRetryWasQueuedForLiftsNothing(t *testing.T) {
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.Add(-24 * time.Hour)
	for _, tc := range []struct {
		name    string
		retries int
		history func(f *fixture, jobID string) // trips max_failures 2 with no retry pending
		forged  func(jobID string) string
	}{
		{"a job without retries", 0,
			func(f *fixture, id string) {
				j := f.get(id)
				f.attempt(j, runkey.Scheduled(id, yesterday), yesterday, wire.ResultExitCode)
				if res := f.attempt(j, runkey.Scheduled(id, today), today, wire.ResultExitCode); !res.AutoDisabled {
					f.t.Fatalf("precondition: trip: %+v", res.Job)
				}
			},
			func(id string) string { return runkey.Retry(id, today, 2) }},
		{"attempt 3 of a job with 1 retry, attempt 2 failed", 1,
			func(f *fixture, id string) {
				j := f.get(id)
				if res := f.attempt(j, runkey.Scheduled(id, today), today, wire.ResultExitCode); res.Retry == "" {
					f.t.Fatalf("precondition: today's retry queued: %+v", res)
				}
				if res := f.attempt(j, runkey.Retry(id, today, 2), today, wire.ResultExitCode); res.Retry != "" || res.Job.ConsecutiveFailures != 1 {
					f.t.Fatalf("precondition: attempt 2 is the last, and counts: %+v", res)
				}
				if res := f.attempt(j, runkey.Manual(id, "7"), time.Now().UTC(), wire.ResultExitCode); !res.AutoDisabled {
					f.t.Fatalf("precondition: trip with every attempt failed and a run-now failed after: %+v", res.Job)
				}
			},
			func(id string) string { return runkey.Retry(id, today, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			j := f.retryJob(tc.retries, 2)
			tc.history(f, j.ID)
			if got := f.get(j.ID); got.Status != wire.StatusAutoDisabled || got.ConsecutiveFailures != 2 {
				t.Fatalf("precondition: %s with %d failures", got.Status, got.ConsecutiveFailures)
			}
			if n := len(f.retryTasks(j.ID)); n > 1 {
				t.Fatalf("precondition: %d retry tasks", n)
			}
			res := f.attempt(j, tc.forged(j.ID), today, wire.ResultSuccess)
			got := f.get(j.ID)
			if res.Reenabled || got.Status != wire.StatusAutoDisabled || got.Enabled {
				t.Errorf("a success under retry key %s, which the core never queued, lifted the auto-disable: %s (enabled %v, reenabled %v, %d failures)",
					tc.forged(j.ID), got.Status, got.Enabled, res.Reenabled, got.ConsecutiveFailures)
			}
		})
	}
}
