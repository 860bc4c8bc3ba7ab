package store_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// fixture is a store with one shard, node, tenant and webroot.
type fixture struct {
	t       *testing.T
	st      *store.Store
	node    store.Node
	tenant  string
	webroot string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st := pgtest.New(t)
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	must(t, err)
	node, _, err := st.CreateNode(ctx, sh.ID, "node1")
	must(t, err)
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", ShardID: sh.ID, LinuxUser: "acme", LinuxGroup: "acme"})
	must(t, err)
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/acme/public")
	must(t, err)
	return &fixture{t: t, st: st, node: node, tenant: tn.ID, webroot: wr.ID}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// job creates an active every-minute job with a 60 s timeout.
func (f *fixture) job(maxFailures int) store.CronJob {
	f.t.Helper()
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: maxFailures}, nil)
	must(f.t, err)
	f.activate(j.ID)
	return f.get(j.ID)
}

func (f *fixture) activate(id string) {
	f.t.Helper()
	j := f.get(id)
	ok, err := f.st.SetProvisioned(context.Background(), id, j.Version, wire.StatusActive, "", 1)
	if err != nil || !ok {
		f.t.Fatalf("SetProvisioned: %v %v", ok, err)
	}
}

func (f *fixture) get(id string) store.CronJob {
	f.t.Helper()
	j, err := f.st.GetJob(context.Background(), id)
	must(f.t, err)
	return j
}

// sweepFrom pretends the job has been on its nodes since from.
func (f *fixture) sweepFrom(id string, from time.Time) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, id, from)
	must(f.t, err)
}

func (f *fixture) outcome(j store.CronJob, slot time.Time, r wire.Result) store.OutcomeResult {
	f.t.Helper()
	started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
	res, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot, StartedAt: &started,
		FinishedAt: &finished, Result: r,
	})
	must(f.t, err)
	return res
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	must(f.t, f.st.Pool().QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// A late success that replaces a lost record shows the failures were not
// consecutive: the counter is recomputed and the auto-disable they caused
// is lifted, with the enable queued for the nodes.
func TestLateOutcomeReplacingLostRecountsAndLifts(t *testing.T) {
	f := newFixture(t)
	j := f.job(3)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	s1, s2, s3 := s0.Add(time.Minute), s0.Add(2*time.Minute), s0.Add(3*time.Minute)
	f.sweepFrom(j.ID, s0.Add(time.Second))

	f.outcome(j, s0, wire.ResultExitCode)
	rep, err := f.st.SweepLostRuns(context.Background(), s1.Add(2*time.Minute+time.Second), time.Minute)
	must(t, err)
	if rep.Lost != 1 || f.get(j.ID).ConsecutiveFailures != 1 {
		t.Fatalf("sweep: %+v, job %+v; want 1 lost that does not count", rep, f.get(j.ID))
	}
	f.outcome(j, s2, wire.ResultTimeout)
	if res := f.outcome(j, s3, wire.ResultOOM); !res.AutoDisabled || res.Job.Status != wire.StatusAutoDisabled {
		t.Fatalf("third tenant failure: %+v", res)
	}
	res := f.outcome(j, s1, wire.ResultSuccess)
	if res.Duplicate || !res.Replaced || !res.Reenabled {
		t.Fatalf("late success: %+v", res)
	}
	got := f.get(j.ID)
	if got.ConsecutiveFailures != 2 || !got.Enabled || got.Status != wire.StatusPending {
		t.Errorf("after the late success: %+v; want 2 failures, enabled, pending", got)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = $2 AND version = $3`,
		j.ID, wire.ActionEnable, got.Version); n != 1 {
		t.Errorf("%d enable tasks for the lift, want 1", n)
	}
	if again := f.outcome(j, s1, wire.ResultExitCode); !again.Duplicate {
		t.Errorf("second real result for one run key: %+v, want duplicate", again)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 4 {
		t.Errorf("%d runs, want 4", n)
	}
}

// A real result replaces an overlap skip of the same run key and counts.
func TestRealResultReplacesOverlapSkip(t *testing.T) {
	f := newFixture(t)
	j := f.job(5)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	if res := f.outcome(j, slot, wire.ResultOverlapSkipped); res.Duplicate || res.Job.ConsecutiveFailures != 0 {
		t.Fatalf("overlap skip: %+v", res)
	}
	if res := f.outcome(j, slot, wire.ResultOverlapSkipped); !res.Duplicate {
		t.Errorf("a second overlap skip: %+v, want duplicate", res)
	}
	res := f.outcome(j, slot, wire.ResultExitCode)
	if res.Duplicate || !res.Replaced || res.Job.ConsecutiveFailures != 1 {
		t.Errorf("real result after the skip: %+v", res)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'exit_code'`, j.ID); n != 1 {
		t.Errorf("%d exit_code rows, want the skip replaced", n)
	}
}

// Lost and platform errors are recorded but never disable the job.
func TestPlatformResultsNeverDisable(t *testing.T) {
	f := newFixture(t)
	j := f.job(2)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 4; i++ {
		f.outcome(j, slot.Add(time.Duration(i)*time.Minute), wire.ResultPlatformError)
	}
	f.sweepFrom(j.ID, slot.Add(4*time.Minute))
	rep, err := f.st.SweepLostRuns(context.Background(), slot.Add(20*time.Minute), time.Minute)
	must(t, err)
	got := f.get(j.ID)
	if rep.Lost == 0 || got.ConsecutiveFailures != 0 || got.Status != wire.StatusActive || !got.Enabled {
		t.Errorf("after platform errors and %d lost runs: %+v", rep.Lost, got)
	}
}

// The lost record of a slot is keyed by its run key: a version bump
// between two sweeps of the slot leaves one row, and the node's report
// under the new version replaces it.
func TestVersionBumpLeavesOneRowPerSlot(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	ctx := context.Background()
	f.sweepFrom(j.ID, slot.Add(-time.Second))
	_, err := f.st.SweepLostRuns(ctx, slot.Add(2*time.Minute+time.Second), time.Minute)
	must(t, err)
	_, err = f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.Command = "false"; return x, nil })
	must(t, err)
	f.activate(j.ID)
	f.sweepFrom(j.ID, slot.Add(-time.Second))
	_, err = f.st.SweepLostRuns(ctx, slot.Add(2*time.Minute+time.Second), time.Minute)
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at = $2`, j.ID, slot); n != 1 {
		t.Fatalf("%d rows for one slot across a version bump, want 1", n)
	}
	j2 := f.get(j.ID)
	if res := f.outcome(j2, slot, wire.ResultSuccess); !res.Replaced {
		t.Errorf("report under the new version: %+v", res)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND version = $2`, j.ID, j2.Version); n != 1 {
		t.Errorf("the replaced row does not carry the reporting version")
	}
}

// Slots before the job became active on its nodes are never counted as
// lost: an enable that waited out an outage starts the sweep at
// provisioning, not at the API call.
func TestSweepStartsWhenTheNodesHaveTheJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	// Created an hour ago; provisioning (a Temporal outage) only now. The
	// sweeper ran all along and counted nothing.
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = now() - interval '1 hour' WHERE id = $1`, j.ID)
	must(t, err)
	rep, err := f.st.SweepLostRuns(ctx, time.Now(), time.Minute)
	must(t, err)
	if rep.Lost != 0 {
		t.Errorf("%d lost runs of a job no node has yet", rep.Lost)
	}
	f.activate(j.ID)
	rep, err = f.st.SweepLostRuns(ctx, time.Now().Add(5*time.Minute), time.Minute)
	must(t, err)
	if rep.Lost > 4 {
		t.Errorf("%d lost runs: slots before provisioning were counted", rep.Lost)
	}
	if rep.Lost < 2 {
		t.Errorf("%d lost runs: slots after provisioning were not swept", rep.Lost)
	}
}

// A job no node accepted (every node failed its provisioning, or its
// shard has none) has no slot counted however long it stands failed, and
// the sweep starts when a provisioning (here: retry) reports a node that
// has it. A schedule change that no node took stops counting too: the
// nodes never had the new schedule.
func TestNoSlotCountedBeforeANodeHasTheJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	provision := func(status wire.Status, took int) {
		t.Helper()
		v := f.get(j.ID).Version
		ok, err := f.st.SetProvisioned(ctx, j.ID, v, status, "not provisioned on node1: down", took)
		if err != nil || !ok {
			t.Fatalf("SetProvisioned(%s, took %d): %v %v", status, took, ok, err)
		}
	}
	lost := func() int {
		return f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost'`, j.ID)
	}
	sweep := func(at time.Time) {
		t.Helper()
		_, err := f.st.SweepLostRuns(ctx, at, time.Minute)
		must(t, err)
	}

	provision(wire.StatusFailed, 0)
	sweep(time.Now().Add(2 * time.Hour))
	if n := lost(); n != 0 {
		t.Fatalf("%d lost runs of a job no node accepted", n)
	}

	_, err = f.st.RetryJob(ctx, j.ID, 0)
	must(t, err)
	provision(wire.StatusActive, 1)
	start := time.Now()
	sweep(start.Add(10 * time.Minute))
	if n := lost(); n < 6 || n > 9 {
		t.Fatalf("%d lost runs in the 10 minutes after a node took it, want about 8", n)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at < $2`, j.ID, start.Add(-time.Second)); n != 0 {
		t.Errorf("%d lost runs before the retry put the job on a node", n)
	}

	// A schedule change no node takes: nothing runs the new schedule.
	before := lost()
	_, err = f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.Schedule = "*/2 * * * *"; return x, nil })
	must(t, err)
	provision(wire.StatusFailed, 0)
	sweep(start.Add(3 * time.Hour))
	if n := lost(); n != before {
		t.Errorf("%d lost runs after a schedule change no node took, want still %d", n, before)
	}
}

// A job enabled during a Temporal outage: its nodes have it disabled
// until the outage ends, so the sweep counts from the provisioning, not
// from the enable, and not from where it stood before the disable.
func TestEnableDuringOutageCountsFromProvisioning(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	f.sweepFrom(j.ID, time.Now().Add(-3*time.Hour))
	_, err := f.st.DisableJob(ctx, j.ID, 0)
	must(t, err)
	ok, err := f.st.SetProvisioned(ctx, j.ID, f.get(j.ID).Version, wire.StatusDisabled, "", 1)
	if err != nil || !ok {
		t.Fatalf("SetProvisioned: %v %v", ok, err)
	}
	_, err = f.st.EnableJob(ctx, j.ID, 0)
	must(t, err)
	// The enable waits an hour in the outbox; sweeps meanwhile count nothing.
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = now() - interval '1 hour' WHERE id = $1`, j.ID)
	must(t, err)
	rep, err := f.st.SweepLostRuns(ctx, time.Now(), time.Minute)
	must(t, err)
	if rep.Lost != 0 {
		t.Fatalf("%d lost runs while the enable waited in the outbox", rep.Lost)
	}
	provisioned := time.Now()
	f.activate(j.ID)
	_, err = f.st.SweepLostRuns(ctx, provisioned.Add(5*time.Minute), time.Minute)
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at < $2`, j.ID, provisioned.Add(-time.Second)); n != 0 {
		t.Errorf("%d lost runs before the enable reached the nodes", n)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n < 2 {
		t.Errorf("%d lost runs after the enable reached the nodes, want the unreported slots since", n)
	}
}

// One job whose stored schedule no longer parses is skipped and reported;
// the others are still swept.
func TestSweepSkipsABadRow(t *testing.T) {
	f := newFixture(t)
	bad, good := f.job(0), f.job(0)
	from := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(bad.ID, from)
	f.sweepFrom(good.ID, from)
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE cron_jobs SET schedule = 'not a schedule' WHERE id = $1`, bad.ID)
	must(t, err)
	rep, err := f.st.SweepLostRuns(context.Background(), from.Add(10*time.Minute), time.Minute)
	must(t, err)
	if len(rep.Skipped) != 1 || rep.Skipped[0].ID != bad.ID || rep.Skipped[0].Err == nil {
		t.Errorf("skipped: %+v, want the bad job", rep.Skipped)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, good.ID); n == 0 || n != rep.Lost {
		t.Errorf("good job: %d lost rows, report %d", n, rep.Lost)
	}
}

// A job whose row another transaction holds past the leader session's
// lock_timeout is skipped and reported (its transaction rolled back), and
// the sweep goes on with the others: it used to commit the aborted
// transaction and end the whole round.
func TestSweepSkipsAJobLockedPastTheLockTimeout(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	locked, free := f.job(0), f.job(0)
	from := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(locked.ID, from)
	f.sweepFrom(free.ID, from)
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, locked.ID)
	must(t, err)
	l, err := f.st.TryLead(ctx, store.HousekeepingLeader, store.LeaderConfig{Keepalive: 100 * time.Millisecond,
		ConfirmTimeout: 100 * time.Millisecond, LockTimeout: 300 * time.Millisecond})
	if err != nil || l == nil {
		t.Fatal(l, err)
	}
	defer l.Release(ctx)
	var rep store.SweepReport
	err = l.Do(ctx, func(ctx context.Context, c store.Chores) error {
		var e error
		rep, e = c.SweepLostRuns(ctx, from.Add(10*time.Minute), time.Minute)
		return e
	})
	if err != nil {
		t.Fatalf("one locked job row ended the sweep: %v", err)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].ID != locked.ID {
		t.Errorf("skipped: %+v, want the locked job", rep.Skipped)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, free.ID); n == 0 || n != rep.Lost {
		t.Errorf("free job: %d lost rows, report %d", n, rep.Lost)
	}
	// The lead's session is usable after the rolled-back job: a later
	// duty runs, and once the lock is gone the skipped job is swept.
	must(t, tx.Rollback(ctx))
	err = l.Do(ctx, func(ctx context.Context, c store.Chores) error {
		var e error
		rep, e = c.SweepLostRuns(ctx, from.Add(10*time.Minute), time.Minute)
		return e
	})
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, locked.ID); n == 0 || len(rep.Skipped) != 0 {
		t.Errorf("after the lock: %d lost rows of the once-locked job, skipped %+v", n, rep.Skipped)
	}
}

// not_before moves at create, enable and schedule or time zone changes,
// not at command-only edits, and reaches the desired job.
func TestNotBefore(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(5)
	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	reset := func() {
		_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = $2 WHERE id = $1`, j.ID, past)
		must(t, err)
	}
	moved := func() bool { return f.get(j.ID).NotBefore.After(past) }
	set := func(m func(*store.JobFields)) {
		_, err := f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { m(&x); return x, nil })
		must(t, err)
	}
	if !moved() {
		t.Error("create did not set not_before")
	}
	reset()
	set(func(x *store.JobFields) { x.Command = "false" })
	if moved() {
		t.Error("a command-only edit moved not_before")
	}
	d, _, err := f.st.DesiredJob(ctx, j.ID)
	must(t, err)
	if !d.NotBefore.Equal(past) {
		t.Errorf("desired job NotBefore %v, want %v", d.NotBefore, past)
	}
	set(func(x *store.JobFields) { x.Schedule = "0 3 * * *" })
	if !moved() {
		t.Error("a schedule change did not move not_before")
	}
	reset()
	set(func(x *store.JobFields) { x.Timezone = "Europe/Berlin" })
	if !moved() {
		t.Error("a time zone change did not move not_before")
	}
	_, err = f.st.DisableJob(ctx, j.ID, 0)
	must(t, err)
	reset()
	_, err = f.st.EnableJob(ctx, j.ID, 0)
	must(t, err)
	if !moved() {
		t.Error("enable did not move not_before")
	}
}

// Enable starts the failure counter afresh: failures before it do not
// come back at the next outcome.
func TestEnableStartsCountingAfresh(t *testing.T) {
	f := newFixture(t)
	j := f.job(3)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 3; i++ {
		f.outcome(j, slot.Add(time.Duration(i)*time.Minute), wire.ResultExitCode)
	}
	_, err := f.st.EnableJob(context.Background(), j.ID, 0)
	must(t, err)
	f.activate(j.ID)
	res := f.outcome(f.get(j.ID), time.Now().UTC().Truncate(time.Second).Add(2*time.Second), wire.ResultExitCode)
	if res.Job.ConsecutiveFailures != 1 || res.AutoDisabled {
		t.Errorf("first failure after enable: %+v", res)
	}
}

// A run in flight when its job was auto-disabled, or a run-now of the
// disabled job, that reports its failure after the tenant enabled the
// job again belongs to the old streak: it was recorded after the enable,
// but it started before it, and it counts neither way. It used to count,
// and with max_failures 1 it disabled the job the tenant had just enabled.
// A retry (the lift of an auto-disable) starts the window the same way.
// A run-now goes by its request, not its scheduled_at (the node's clock).
func TestFailureOfARunFromBeforeTheEnableCountsNeitherWay(t *testing.T) {
	for _, c := range []struct{ lift, run string }{
		{"enable", "scheduled"}, {"retry", "scheduled"}, {"enable", "run-now"}, {"retry", "run-now"},
	} {
		t.Run(c.lift+" "+c.run, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			j := f.job(1)
			slot := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
			// The run still under way when the job is disabled: the next
			// slot's, or a run-now of the job (asked before the trip).
			_, request, err := f.st.RunNow(ctx, j.ID, 0)
			must(t, err)
			if res := f.outcome(j, slot, wire.ResultExitCode); !res.AutoDisabled {
				t.Fatalf("the first failure under max_failures 1: %+v, want auto-disabled", res)
			}
			if c.lift == "enable" {
				_, err = f.st.EnableJob(ctx, j.ID, 0)
			} else {
				_, err = f.st.RetryJob(ctx, j.ID, 0)
			}
			must(t, err)
			f.activate(j.ID)
			var res store.OutcomeResult
			if c.run == "scheduled" {
				res = f.outcome(j, slot.Add(30*time.Second), wire.ResultTimeout)
			} else { // a node clock ahead dates it after the enable: no matter
				res = f.manualOutcome(j, request, time.Now().UTC().Truncate(time.Second).Add(5*time.Minute), wire.ResultTimeout)
			}
			if res.Duplicate || res.AutoDisabled || res.Job.ConsecutiveFailures != 0 || res.Job.Status != wire.StatusActive {
				t.Fatalf("a failure of a run from before the %s: %+v; want it recorded, counted neither way, the job still active", c.lift, res)
			}
			if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'timeout'`, j.ID); n != 1 {
				t.Fatalf("%d timeout runs recorded, want the late report in the history", n)
			}
			// A slot after the lift counts, as before.
			if res := f.outcome(f.get(j.ID), time.Now().UTC().Truncate(time.Second).Add(2*time.Second), wire.ResultExitCode); !res.AutoDisabled {
				t.Fatalf("a failure after the %s: %+v, want it counted (max_failures 1)", c.lift, res)
			}
		})
	}
}

// A run-now the tenant asks for after enabling its auto-disabled job (the
// "I fixed it, let me try" click) is of the new streak, whatever the node's
// clock dates it: within the enable's second, or a minute before it on a
// node whose clock is behind (review s21c).
func TestRunNowAfterTheEnableCountsWhateverTheNodesClock(t *testing.T) {
	for _, behind := range []time.Duration{0, time.Minute} {
		t.Run("node behind "+behind.String(), func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			j := f.job(1)
			if res := f.outcome(j, time.Now().UTC().Truncate(time.Minute).Add(-time.Hour), wire.ResultExitCode); !res.AutoDisabled {
				t.Fatalf("first failure: %+v", res)
			}
			enabled, err := f.st.EnableJob(ctx, j.ID, 0)
			must(t, err)
			f.activate(j.ID)
			_, request, err := f.st.RunNow(ctx, j.ID, 0)
			must(t, err)
			at := enabled.UpdatedAt.Add(-behind).Truncate(time.Second)
			if res := f.manualOutcome(f.get(j.ID), request, at, wire.ResultExitCode); !res.AutoDisabled {
				t.Errorf("the failure of a run-now asked after the enable, dated %s: %+v; want it counted (max_failures 1)", at, res)
			}
		})
	}
}

// An enable of a job that was never disabled, or a retry of a pending
// job, lifts nothing and restarts nothing: a run of the active job in
// flight across it is a run like any other, and counts (review s21c).
func TestInFlightRunOfAnEnabledJobCountsAcrossANoopEnable(t *testing.T) {
	for _, change := range []string{"enable of an active job", "retry of a pending job"} {
		t.Run(change, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			j := f.job(1)
			slot := time.Now().UTC().Truncate(time.Second).Add(-30 * time.Second) // under way
			var err error
			if change == "enable of an active job" {
				_, err = f.st.EnableJob(ctx, j.ID, 0)
			} else {
				_, err = f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) {
					x.Command = "php artisan x"
					return x, nil
				})
				must(t, err)
				_, err = f.st.RetryJob(ctx, j.ID, 0)
			}
			must(t, err)
			f.activate(j.ID)
			if res := f.outcome(j, slot, wire.ResultExitCode); !res.AutoDisabled {
				t.Errorf("the failure of a run in flight across an %s: %+v; want it counted", change, res)
			}
		})
	}
}

// manualOutcome records the outcome of run-now request dated at, as a
// node dates it (its clock when the request reached it, to the second).
func (f *fixture) manualOutcome(j store.CronJob, request string, at time.Time, r wire.Result) store.OutcomeResult {
	f.t.Helper()
	started, finished := at.Add(time.Second), at.Add(2*time.Second)
	res, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: runkey.Manual(j.ID, request), Version: j.Version, ScheduledAt: at, StartedAt: &started,
		FinishedAt: &finished, Result: r, Trigger: wire.TriggerManual,
	})
	must(f.t, err)
	return res
}

// If-Match names the version a change applies to.
func TestIfMatch(t *testing.T) {
	f := newFixture(t)
	j := f.job(5)
	if _, err := f.st.DisableJob(context.Background(), j.ID, j.Version+1); !errors.Is(err, store.ErrPreconditionFailed) {
		t.Errorf("stale version: %v", err)
	}
	if got := f.get(j.ID); got.Version != j.Version || !got.Enabled {
		t.Errorf("a failed precondition changed the job: %+v", got)
	}
	if _, err := f.st.DisableJob(context.Background(), j.ID, j.Version); err != nil {
		t.Errorf("current version: %v", err)
	}
}

// Node A's shared storage fails (ESTALE) and it reports platform_error at
// once; node B, healthy, wins the election, runs the slot and reports
// later. B's result is the run's: it replaces A's report and counts.
func TestRunResultReplacesAnotherNodesPlatformError(t *testing.T) {
	f := newFixture(t)
	j := f.job(2)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 2; i++ {
		slot := s0.Add(time.Duration(i) * time.Minute)
		if res := f.outcome(j, slot, wire.ResultPlatformError); res.Duplicate {
			t.Fatalf("platform error of node A: %+v", res)
		}
		res := f.outcome(j, slot, wire.ResultExitCode)
		if res.Duplicate || !res.Replaced {
			t.Fatalf("node B's exit_code after A's platform error: %+v; want it recorded", res)
		}
	}
	got := f.get(j.ID)
	if got.ConsecutiveFailures != 2 || got.Status != wire.StatusAutoDisabled {
		t.Errorf("after two real failures hidden behind platform errors: %+v; want 2 failures, auto_disabled", got)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'exit_code'`, j.ID); n != 2 {
		t.Errorf("%d exit_code rows, want 2", n)
	}
	if res := f.outcome(j, s0, wire.ResultPlatformError); !res.Duplicate {
		t.Errorf("a platform error after the real result: %+v, want duplicate", res)
	}
}

// A change that leaves the schedule alone (a command edit, a retry) does
// not move the sweep past the slots the nodes had all along: a run lost
// on a node that died just before the edit is still recorded.
func TestEditKeepsSweepingSlotsTheNodesHad(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	from := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	// On its nodes since long before from, swept up to from; no report since.
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = $2, not_before = $2::timestamptz - interval '1 hour' WHERE id = $1`,
		j.ID, from.Add(-time.Second))
	must(t, err)
	_, err = f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.Command = "false"; return x, nil })
	must(t, err)
	f.activate(j.ID)
	_, err = f.st.SweepLostRuns(ctx, time.Now().Add(5*time.Minute), time.Minute)
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost' AND scheduled_at = $2`, j.ID, from); n != 1 {
		t.Errorf("slot %s, unreported, before a command edit: %d lost records, want 1", from, n)
	}
}

// A failure that replaces a placeholder never lifts an auto-disable, even
// when the threshold was raised while the job stood disabled: only enable
// and retry (or a success that breaks the streak) do.
func TestReplacingFailureNeverLifts(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(2)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(j, s0, wire.ResultOverlapSkipped)
	f.outcome(j, s0.Add(time.Minute), wire.ResultExitCode)
	if res := f.outcome(j, s0.Add(2*time.Minute), wire.ResultExitCode); !res.AutoDisabled {
		t.Fatalf("second failure: %+v", res)
	}
	_, err := f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { x.MaxFailures = 10; return x, nil })
	must(t, err)
	res := f.outcome(f.get(j.ID), s0, wire.ResultExitCode) // the skipped slot's real run, reported late: a failure
	if !res.Replaced || res.Reenabled {
		t.Errorf("a failure replacing a skip: %+v; want replaced, not re-enabled", res)
	}
	if got := f.get(j.ID); got.Enabled || got.Status != wire.StatusAutoDisabled || got.ConsecutiveFailures != 3 {
		t.Errorf("after a third failure: %+v; want 3 failures, still auto_disabled", got)
	}
}

// A job created on a shard without nodes is not active: nothing runs it.
// It is failed, a retry accepts it, and a node's announce re-queues it;
// the provisioning that puts it on the node starts its sweep.
func TestJobOnAShardWithoutNodesWaitsForANode(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.st.DeleteNode(ctx, f.node.ID)
	must(t, err)
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	provision := func(status wire.Status, took int) store.CronJob {
		t.Helper()
		ok, err := f.st.SetProvisioned(ctx, j.ID, f.get(j.ID).Version, status, "", took)
		if err != nil || !ok {
			t.Fatalf("SetProvisioned: %v %v", ok, err)
		}
		return f.get(j.ID)
	}
	sweptNull := func() bool {
		var null bool
		must(t, f.st.Pool().QueryRow(ctx, `SELECT swept_until IS NULL FROM cron_jobs WHERE id = $1`, j.ID).Scan(&null))
		return null
	}
	// The workflow found no node: "active", no node took it.
	if got := provision(wire.StatusActive, 0); got.Status != wire.StatusFailed || got.StatusMessage != store.NoNodeMessage {
		t.Fatalf("no node: %s %q, want failed %q", got.Status, got.StatusMessage, store.NoNodeMessage)
	}
	if !sweptNull() {
		t.Fatal("the sweep of a job no node has started")
	}
	if _, err := f.st.RetryJob(ctx, j.ID, 0); err != nil {
		t.Fatalf("retry of a job no node has: %v", err)
	}
	provision(wire.StatusActive, 0)

	sh, err := f.st.GetShard(ctx, f.node.ShardID)
	must(t, err)
	n2, _, err := f.st.CreateNode(ctx, sh.ID, "node2")
	must(t, err)
	requeued, err := f.st.AnnounceNode(ctx, n2.ID)
	must(t, err)
	if got := f.get(j.ID); requeued != 1 || got.Status != wire.StatusPending {
		t.Fatalf("announce re-queued %d, job %s; want 1, pending", requeued, got.Status)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry' AND version = $2`,
		j.ID, f.get(j.ID).Version); n != 1 {
		t.Fatalf("%d retry tasks queued at the new version, want 1", n)
	}
	if got := provision(wire.StatusActive, 1); got.Status != wire.StatusActive || sweptNull() {
		t.Errorf("after the node took it: %s, swept NULL %v; want active and swept", got.Status, sweptNull())
	}
	// A second announce (the agent restarts) finds nothing failed.
	if requeued, err := f.st.AnnounceNode(ctx, n2.ID); err != nil || requeued != 0 {
		t.Errorf("second announce re-queued %d (%v), want 0", requeued, err)
	}
}

// failedJob creates a job whose provisioning failed with message.
func (f *fixture) failedJob(message string) store.CronJob {
	f.t.Helper()
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(f.t, err)
	f.fail(j.ID, message)
	return f.get(j.ID)
}

// fail records a failed provisioning of the job's current version.
func (f *fixture) fail(id, message string) {
	f.t.Helper()
	ok, err := f.st.SetProvisioned(context.Background(), id, f.get(id).Version, wire.StatusFailed, message, 1)
	if err != nil || !ok {
		f.t.Fatalf("SetProvisioned failed: %v %v", ok, err)
	}
}

// A node's announce re-queues the failed jobs its start can cure: those
// whose provisioning failed on it, or found no node on the shard. A job
// that failed on other nodes only keeps its version (the tenant's ETag)
// and gets no retry.
func TestAnnounceRequeuesOnlyWhatTheNodeCanCure(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, name := range []string{"node2", "node10"} {
		_, _, err := f.st.CreateNode(ctx, f.node.ShardID, name)
		must(t, err)
	}
	cured := []store.CronJob{
		f.failedJob("not provisioned on node1: activity StartToClose timeout"),
		f.failedJob("not provisioned on node2: connection refused; node1: timeout"),
		f.failedJob(store.NoNodeMessage),
	}
	kept := []store.CronJob{
		f.failedJob("not provisioned on node2: connection refused"),
		f.failedJob("not provisioned on node10: timeout"),
	}
	requeued, err := f.st.AnnounceNode(ctx, f.node.ID)
	must(t, err)
	if requeued != len(cured) {
		t.Errorf("announce of node1 re-queued %d jobs, want %d", requeued, len(cured))
	}
	for _, j := range cured {
		got := f.get(j.ID)
		if got.Status != wire.StatusPending || got.Version != j.Version+1 || got.StatusMessage != "" {
			t.Errorf("job failed with %q: %s at version %d (was %d); want pending at the next", j.StatusMessage, got.Status, got.Version, j.Version)
		}
		if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry' AND version = $2`, j.ID, got.Version); n != 1 {
			t.Errorf("job failed with %q: %d retry tasks, want 1", j.StatusMessage, n)
		}
	}
	for _, j := range kept {
		got := f.get(j.ID)
		if got.Status != wire.StatusFailed || got.Version != j.Version || got.StatusMessage != j.StatusMessage {
			t.Errorf("job failed with %q only on other nodes: %s at version %d (was %d); want untouched", j.StatusMessage, got.Status, got.Version, j.Version)
		}
		if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry'`, j.ID); n != 0 {
			t.Errorf("job failed with %q only on other nodes: %d retry tasks", j.StatusMessage, n)
		}
	}
}

// An agent in a crash loop (Restart=always, RestartSec=2) announces at
// every start. A job that fails on another node is never its to re-queue;
// one that fails on it (its provisioning races the restarts) is re-queued
// once per store.RequeueInterval, not at every start: the tenant's ETag
// holds, and one retry is queued, not one per restart.
func TestAnnounceOfACrashLoopingAgentRequeuesOncePerInterval(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, _, err := f.st.CreateNode(ctx, f.node.ShardID, "node2")
	must(t, err)
	onNode2 := f.failedJob("not provisioned on node2: connection refused")
	onNode1 := f.failedJob("not provisioned on node1: connection refused")
	announce := func() int {
		t.Helper()
		n, err := f.st.AnnounceNode(ctx, f.node.ID)
		must(t, err)
		return n
	}
	total := 0
	for i := 0; i < 20; i++ {
		if got := f.get(onNode1.ID); got.Status == wire.StatusPending {
			f.fail(onNode1.ID, "not provisioned on node1: connection refused") // node1 was down again
		}
		seen := f.get(onNode2.ID).Version // the tenant's ETag
		total += announce()
		if _, err := f.st.UpdateJob(ctx, onNode2.ID, seen, func(jf store.JobFields) (store.JobFields, error) { return jf, nil }); err != nil {
			t.Fatalf("restart %d: the tenant's update with the ETag read a moment before: %v", i, err)
		}
	}
	if total != 1 {
		t.Errorf("20 restarts re-queued %d times, want once", total)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry'`, onNode1.ID); n != 1 {
		t.Errorf("20 restarts queued %d retries of the job that failed on node1, want 1", n)
	}
	if got := f.get(onNode1.ID); got.Version != onNode1.Version+1 || got.Status != wire.StatusFailed {
		t.Errorf("job that failed on node1: %s at version %d (was %d); want failed at the next", got.Status, got.Version, onNode1.Version)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry'`, onNode2.ID); n != 0 {
		t.Errorf("%d retries queued for the job that failed on node2 only", n)
	}
	// Once the interval has passed, the next start re-queues it again.
	if _, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET requeued_at = requeued_at - make_interval(secs => $2) WHERE id = $1`,
		onNode1.ID, store.RequeueInterval.Seconds()); err != nil {
		t.Fatal(err)
	}
	if n := announce(); n != 1 || f.get(onNode1.ID).Status != wire.StatusPending {
		t.Errorf("announce after the interval re-queued %d, job %s; want 1, pending", n, f.get(onNode1.ID).Status)
	}
}

// A drain or delete changes the shard's node set, so every failed job may
// now succeed: it re-queues them all, whatever node failed them and however
// recently an announce re-queued them. Draining a node that already drains
// changes nothing and re-queues nothing.
func TestDrainAndDeleteRequeueEveryFailedJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	n2, _, err := f.st.CreateNode(ctx, f.node.ShardID, "node2")
	must(t, err)
	onNode2 := f.failedJob("not provisioned on node2: connection refused")
	other := f.failedJob("something else failed")
	// node2's announce re-queues its job, which fails on it again.
	if n, err := f.st.AnnounceNode(ctx, n2.ID); err != nil || n != 1 {
		t.Fatalf("announce of node2 re-queued %d (%v), want 1", n, err)
	}
	f.fail(onNode2.ID, "not provisioned on node2: connection refused")
	_, requeued, err := f.st.DrainNode(ctx, n2.ID)
	must(t, err)
	if requeued != 2 || f.get(onNode2.ID).Status != wire.StatusPending || f.get(other.ID).Status != wire.StatusPending {
		t.Errorf("drain re-queued %d: %s, %s; want 2, both pending", requeued, f.get(onNode2.ID).Status, f.get(other.ID).Status)
	}
	f.fail(onNode2.ID, "not provisioned on node2: connection refused") // a verdict from before the drain
	if _, requeued, err := f.st.DrainNode(ctx, n2.ID); err != nil || requeued != 0 {
		t.Errorf("draining a draining node again re-queued %d (%v), want 0", requeued, err)
	}
	if requeued, err := f.st.DeleteNode(ctx, n2.ID); err != nil || requeued != 1 {
		t.Errorf("delete re-queued %d (%v), want 1", requeued, err)
	}
}

// A job whose provisioning no node took (a one-node shard whose agent
// restarted meanwhile) reaches the node by its converge, which writes no
// verdict. The node's first report of the current version starts the
// sweep at that run's slot: slots the node then misses are lost, none
// before it is. A report of an older version starts nothing.
func TestOutcomeStartsTheSweepOfAJobNoVerdictPutOnANode(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = now() - interval '2 hours' WHERE id = $1`, j.ID)
	must(t, err)
	ok, err := f.st.SetProvisioned(ctx, j.ID, j.Version, wire.StatusFailed, "not provisioned on node1: restarting", 0)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	j = f.get(j.ID)
	lost := func() int {
		return f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost'`, j.ID)
	}

	// A run of an older version (the node had only that) starts nothing.
	old := j
	old.Version--
	f.outcome(old, time.Now().Add(-90*time.Minute).Truncate(time.Minute), wire.ResultSuccess)
	_, err = f.st.SweepLostRuns(ctx, time.Now().Add(time.Hour), time.Minute)
	must(t, err)
	if n := lost(); n != 0 {
		t.Fatalf("%d lost runs after a report of an older version only", n)
	}

	slot := time.Now().Add(-time.Hour).Truncate(time.Minute)
	f.outcome(j, slot, wire.ResultExitCode)
	for h := 1; h <= 3; h++ {
		_, err := f.st.SweepLostRuns(ctx, time.Now().Add(time.Duration(h)*time.Hour), time.Minute)
		must(t, err)
	}
	if n := lost(); n < 3*60 {
		t.Errorf("%d lost runs in the 4 hours after the node's report, want every unreported slot since", n)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost' AND scheduled_at <= $2`,
		j.ID, slot); n != 0 {
		t.Errorf("%d lost runs at or before the slot the node first reported", n)
	}
}

// oldReplicaProvisioned is the verdict of a replica from before migration
// 005 (a5faaec's SetProvisioned, verbatim), still running in a rolling
// deploy: it keeps a NULL swept_until it finds.
func (f *fixture) oldReplicaProvisioned(j store.CronJob, status wire.Status) {
	f.t.Helper()
	tag, err := f.st.Pool().Exec(context.Background(), `
		UPDATE cron_jobs SET status = $3, status_message = $4, updated_at = now(),
		       swept_until = CASE WHEN $3 IN ($5, $7) AND not_before >= swept_until THEN now() ELSE swept_until END
		WHERE id = $1 AND version = $2 AND status = $6`,
		j.ID, j.Version, status, "", wire.StatusActive, wire.StatusPending, wire.StatusFailed)
	must(f.t, err)
	if tag.RowsAffected() != 1 {
		f.t.Fatal("not provisioned")
	}
}

// Rolling deploy across migration 005: a job this version created (NULL
// swept_until) that an old replica's verdict made active is swept from
// that verdict, as the old replica's rule had it; one on a shard without
// nodes is not (nothing runs it).
func TestJobAnOldReplicaMadeActiveIsSwept(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	newJob := func() store.CronJob {
		j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
			Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
		must(t, err)
		_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = now() - interval '1 hour' WHERE id = $1`, j.ID)
		must(t, err)
		return j
	}
	j := newJob()
	verdict := time.Now()
	f.oldReplicaProvisioned(j, wire.StatusActive)
	rep, err := f.st.SweepLostRuns(ctx, verdict.Add(time.Hour), time.Minute)
	must(t, err)
	if rep.Lost < 50 {
		t.Errorf("%d lost runs in the hour after an old replica made the job active, want about 58", rep.Lost)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at < $2`, j.ID, verdict.Add(-time.Second)); n != 0 {
		t.Errorf("%d lost runs before the old replica's verdict", n)
	}

	// The same on a shard without nodes: not swept.
	_, err = f.st.DeleteNode(ctx, f.node.ID)
	must(t, err)
	k := newJob()
	f.oldReplicaProvisioned(k, wire.StatusActive)
	_, err = f.st.SweepLostRuns(ctx, time.Now().Add(time.Hour), time.Minute)
	must(t, err)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, k.ID); n != 0 {
		t.Errorf("%d lost runs of a job on a shard without nodes", n)
	}
}

// Migration 006 provisions again the jobs 005's code left active with a
// NULL swept_until (a provisioning no node took), so a verdict of the
// current rules decides where their sweep starts.
func TestMigration006RequeuesActiveJobsNoNodeTook(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stuck := f.job(0)
	fine := f.job(0)
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = NULL WHERE id = $1`, stuck.ID)
	must(t, err)
	sql, err := os.ReadFile("migrations/006_sweep_old_writers.sql")
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, string(sql))
	must(t, err)
	if got := f.get(stuck.ID); got.Status != wire.StatusPending || got.Version != stuck.Version+1 {
		t.Errorf("active job with NULL swept_until: %s v%d, want pending v%d", got.Status, got.Version, stuck.Version+1)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'retry' AND version = $2`,
		stuck.ID, stuck.Version+1); n != 1 {
		t.Errorf("%d retry tasks, want 1", n)
	}
	if got := f.get(fine.ID); got.Status != wire.StatusActive || got.Version != fine.Version {
		t.Errorf("a swept active job was touched: %s v%d", got.Status, got.Version)
	}
}
