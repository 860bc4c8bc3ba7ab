package store_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// req is an outcome of j at slot as a batch holds it.
func (f *fixture) req(j store.CronJob, slot time.Time, r wire.Result) store.OutcomeRequest {
	started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
	return store.OutcomeRequest{Node: f.node, JobID: j.ID, Outcome: store.Outcome{
		RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot, StartedAt: &started,
		FinishedAt: &finished, Result: r}}
}

// forJob is r's outcome moved to job j (same slot and result).
func (f *fixture) forJob(r store.OutcomeRequest, j store.CronJob) store.OutcomeRequest {
	return f.req(j, r.Outcome.ScheduledAt, r.Outcome.Result)
}

// Outcomes of one job in one batch are recorded as one after another:
// a redelivery within the batch is a duplicate, failures count in order,
// the job is auto-disabled once, and the answers, the job and what was
// queued are those of the same outcomes recorded one by one. Another
// job's outcomes between them change nothing.
func TestBatchRecordsOneJobsOutcomesInTheirOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	alone, batched, other := f.job(2), f.job(2), f.job(2)
	at := func(m int) time.Time { return time.Date(2026, 11, 20, 10, m, 0, 0, time.UTC) }
	seq := []store.OutcomeRequest{
		f.req(batched, at(1), wire.ResultExitCode),
		f.req(batched, at(1), wire.ResultExitCode), // redelivered
		f.req(batched, at(2), wire.ResultTimeout),  // trips the auto-disable
		f.req(batched, at(3), wire.ResultExitCode), // the disabled job's run in flight
		f.req(batched, at(0), wire.ResultSuccess),  // an older slot: the streak stands
	}
	var want []store.OutcomeAnswer
	for _, r := range seq {
		r = f.forJob(r, alone)
		res, err := f.st.RecordOutcome(ctx, r.Node, r.JobID, r.Outcome)
		want = append(want, store.OutcomeAnswer{Result: res, Err: err})
	}
	// The other job's outcomes sort around the batched job's.
	batch := []store.OutcomeRequest{f.req(other, at(1), wire.ResultSuccess)}
	for i, r := range seq {
		batch = append(batch, r, f.req(other, at(10+i), wire.ResultExitCode))
	}
	got := f.st.RecordOutcomes(ctx, batch)
	for i := range seq {
		g, w := got[1+2*i], want[i]
		if g.Err != nil || w.Err != nil {
			t.Fatalf("outcome %d: batched %v, alone %v", i, g.Err, w.Err)
		}
		if g.Result.Duplicate != w.Result.Duplicate || g.Result.AutoDisabled != w.Result.AutoDisabled ||
			g.Result.Replaced != w.Result.Replaced || g.Result.Job.ConsecutiveFailures != w.Result.Job.ConsecutiveFailures ||
			g.Result.Job.Status != w.Result.Job.Status {
			t.Errorf("outcome %d: batched %+v, alone %+v", i, g.Result, w.Result)
		}
	}
	if !got[3].Result.Duplicate || !got[5].Result.AutoDisabled {
		t.Errorf("the redelivery is not a duplicate or the third failure did not auto-disable: %+v / %+v", got[3].Result, got[5].Result)
	}
	a, b := f.get(alone.ID), f.get(batched.ID)
	if a.Status != b.Status || a.ConsecutiveFailures != b.ConsecutiveFailures || a.Version != b.Version ||
		*a.LastRunAt != *b.LastRunAt || *a.LastSuccessAt != *b.LastSuccessAt {
		t.Errorf("batched job %+v, alone %+v", b, a)
	}
	for _, q := range []string{
		`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`,
		`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'auto_disable'`,
		`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1 AND action = 'auto_disable'`,
	} {
		if na, nb := f.count(q, alone.ID), f.count(q, batched.ID); na != nb || nb == 0 {
			t.Errorf("%s: batched %d, alone %d", q, nb, na)
		}
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, other.ID); n != 1+len(seq) {
		t.Errorf("the other job has %d runs, want %d", n, 1+len(seq))
	}
}

// An outcome the store refuses (an unknown job, a version ahead, a
// constraint of the runs table) fails alone, with the error it gets
// recorded alone; the batch's other outcomes are recorded.
func TestBatchIsolatesARefusedOutcome(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	good1, ahead, bad, good2 := f.job(0), f.job(0), f.job(0), f.job(0)
	slot := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	unknown := f.req(good1, slot, wire.ResultSuccess)
	unknown.JobID = "00000000-0000-0000-0000-000000000001"
	tooNew := f.req(ahead, slot, wire.ResultSuccess)
	tooNew.Outcome.Version = ahead.Version + 1
	// The run key says scheduled; a manual trigger breaks the runs'
	// check constraint: a SQL error, which aborts what it ran in.
	broken := f.req(bad, slot, wire.ResultSuccess)
	broken.Outcome.Trigger = wire.TriggerManual
	batch := []store.OutcomeRequest{f.req(good1, slot, wire.ResultSuccess), unknown, tooNew, broken, f.req(good2, slot, wire.ResultExitCode)}
	got := f.st.RecordOutcomes(ctx, batch)
	for _, i := range []int{0, 4} {
		if got[i].Err != nil || got[i].Result.Duplicate {
			t.Errorf("good outcome %d: %+v", i, got[i])
		}
	}
	for _, i := range []int{1, 2, 3} {
		r := batch[i]
		_, alone := f.st.RecordOutcome(ctx, r.Node, r.JobID, r.Outcome)
		if got[i].Err == nil || alone == nil || got[i].Err.Error() != alone.Error() {
			t.Errorf("refused outcome %d: batched %v, alone %v", i, got[i].Err, alone)
		}
	}
	if !errors.Is(got[1].Err, store.ErrNotFound) || !errors.Is(got[2].Err, store.ErrVersionAhead) {
		t.Errorf("errors: %v / %v", got[1].Err, got[2].Err)
	}
	for id, want := range map[string]int{good1.ID: 1, good2.ID: 1, ahead.ID: 0, bad.ID: 0} {
		if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, id); n != want {
			t.Errorf("job %s: %d runs, want %d", id, n, want)
		}
	}
	if j := f.get(good2.ID); j.ConsecutiveFailures != 1 || j.LastRunAt == nil {
		t.Errorf("good2 after the batch: %d failures, last run %v", j.ConsecutiveFailures, j.LastRunAt)
	}
}

// A batch whose commit fails answers every outcome in it with an error
// and records none of them; the nodes' redeliveries are then recorded
// as first reports.
func TestBatchWhoseCommitFailsRecordsNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A deferred constraint trigger fails the commit, not a statement.
	_, err := f.st.Pool().Exec(ctx, `
		CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS
		  $$BEGIN RAISE EXCEPTION 'commit refused'; END$$;
		CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON cron_job_runs DEFERRABLE INITIALLY DEFERRED
		  FOR EACH ROW WHEN (NEW.failure_reason = 'fail at commit') EXECUTE FUNCTION fail_at_commit();`)
	must(t, err)
	a, b := f.job(1), f.job(1)
	slot := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	poison := f.req(b, slot, wire.ResultExitCode)
	poison.Outcome.FailureReason = "fail at commit"
	batch := []store.OutcomeRequest{f.req(a, slot, wire.ResultExitCode), poison}
	for i, got := range f.st.RecordOutcomes(ctx, batch) {
		if got.Err == nil {
			t.Errorf("outcome %d answered %+v after a failed commit", i, got.Result)
		}
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs`); n != 0 {
		t.Fatalf("%d runs recorded by a failed commit", n)
	}
	if j := f.get(a.ID); j.ConsecutiveFailures != 0 || j.Status == wire.StatusAutoDisabled {
		t.Fatalf("the job counts a failed commit's outcome: %+v", j)
	}
	again := f.st.RecordOutcomes(ctx, batch[:1])
	if again[0].Err != nil || again[0].Result.Duplicate || !again[0].Result.AutoDisabled {
		t.Fatalf("redelivery: %+v", again[0])
	}
}

// An outcome whose operator event cannot be written fails alone, as it
// would alone; the batch is recorded again without it, so its run is
// not recorded and the others', with their operator event, are.
func TestBatchDropsAnOutcomeWhoseOperatorEventFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.operatorTarget(nil, "platform_error")
	a, b, c := f.job(0), f.job(0), f.job(0)
	slot := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	poison := f.req(b, slot, wire.ResultPlatformError)
	poison.Outcome.FailureReason = "operator event refused"
	_, err := f.st.Pool().Exec(ctx, `
		CREATE FUNCTION refuse_event() RETURNS trigger LANGUAGE plpgsql AS
		  $$BEGIN RAISE EXCEPTION 'event refused'; END$$;
		CREATE TRIGGER refuse_event BEFORE INSERT ON notification_events
		  FOR EACH ROW WHEN (NEW.payload->'examples'->0->>'failure_reason' = 'operator event refused') EXECUTE FUNCTION refuse_event();`)
	must(t, err)
	batch := []store.OutcomeRequest{poison, f.req(a, slot, wire.ResultPlatformError), f.req(c, slot, wire.ResultSuccess)}
	got := f.st.RecordOutcomes(ctx, batch)
	_, alone := f.st.RecordOutcome(ctx, poison.Node, poison.JobID, poison.Outcome)
	if got[0].Err == nil || alone == nil || got[0].Err.Error() != alone.Error() {
		t.Errorf("poisoned outcome: batched %v, alone %v", got[0].Err, alone)
	}
	if got[1].Err != nil || got[2].Err != nil {
		t.Fatalf("the others: %v / %v", got[1].Err, got[2].Err)
	}
	for id, want := range map[string]int{a.ID: 1, b.ID: 0, c.ID: 1} {
		if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, id); n != want {
			t.Errorf("job %s: %d runs, want %d", id, n, want)
		}
	}
	if evs := f.opEvents("platform_error"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("operator events: %+v, want one counting a's platform error", evs)
	}
}

// Two batches over the same jobs in opposite orders, side by side (two
// core replicas), both with platform errors on one shard, never deadlock
// (PostgreSQL would abort one with 40P01): job rows are locked in job id
// order, the shard's operator event after them. Nothing is lost.
func TestConcurrentBatchesOverTheSameJobsDoNotDeadlock(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.operatorTarget(nil, "platform_error")
	var jobs []store.CronJob
	for range 6 {
		jobs = append(jobs, f.job(0))
	}
	const rounds = 15
	base := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds*len(jobs))
	for replica := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				var batch []store.OutcomeRequest
				for k := range jobs {
					j := jobs[k]
					if replica == 1 {
						j = jobs[len(jobs)-1-k] // the other order
					}
					slot := base.Add(time.Duration(round*2+replica) * time.Minute)
					result := wire.ResultSuccess
					if k%2 == 0 {
						result = wire.ResultPlatformError
					}
					batch = append(batch, f.req(j, slot, result))
				}
				for _, a := range f.st.RecordOutcomes(ctx, batch) {
					if a.Err != nil {
						errs <- fmt.Errorf("replica %d round %d: %w", replica, round, a.Err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs`); n != 2*rounds*len(jobs) {
		t.Errorf("%d runs, want %d", n, 2*rounds*len(jobs))
	}
}

// The batcher answers an outcome only once the transaction holding it
// has committed: while its commit waits (a deferred trigger waits for a
// lock the test holds), its caller has no answer and no other session
// sees the run; once the commit is through, the caller's answer comes
// and the run is there.
func TestBatcherAnswersOnlyAfterCommit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.st.Pool().Exec(ctx, `
		CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS
		  $$BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END$$;
		CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT ON cron_job_runs DEFERRABLE INITIALLY DEFERRED
		  FOR EACH ROW EXECUTE FUNCTION wait_at_commit();`)
	must(t, err)
	gate, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer gate.Rollback(ctx)
	_, err = gate.Exec(ctx, `SELECT pg_advisory_xact_lock(4242)`)
	must(t, err)

	j := f.job(0)
	r := f.req(j, time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC), wire.ResultSuccess)
	b := f.st.NewOutcomeBatcher(store.BatchConfig{})
	answered := make(chan error, 1)
	go func() {
		_, err := b.RecordOutcome(ctx, r.Node, r.JobID, r.Outcome)
		answered <- err
	}()
	for f.count(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted`) == 0 {
		runtime.Gosched()
	}
	select {
	case err := <-answered:
		t.Fatalf("answered (%v) while the commit waits", err)
	default:
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 0 {
		t.Fatalf("the run is visible before its commit")
	}
	must(t, gate.Rollback(ctx)) // the commit goes through
	must(t, <-answered)
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 1 {
		t.Fatalf("answered, but %d runs", n)
	}
}

// A job whose row another transaction holds (an update, the sweeper,
// another replica's batch) fails only its own outcome, after the batch's
// lock timeout: the other tenants' outcomes in the batch are recorded and
// answered, not held until the batch's deadline and failed with it.
func TestBatchOneHeldJobFailsOnlyItsOwnOutcome(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	held, free := f.job(0), f.job(1)
	holder, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer holder.Rollback(ctx)
	_, err = holder.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, held.ID)
	must(t, err)

	slot := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	reqs := []store.OutcomeRequest{f.req(held, slot, wire.ResultSuccess), f.req(free, slot, wire.ResultSuccess)}
	// The batch's deadline is far beyond the lock timeout: the free job's
	// outcome must not wait for it.
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	answers := f.st.RecordOutcomes(bctx, reqs)
	if answers[0].Err == nil || !strings.Contains(answers[0].Err.Error(), "lock timeout") {
		t.Errorf("the held job's outcome: %v, want its lock timeout", answers[0].Err)
	}
	if answers[1].Err != nil {
		t.Fatalf("the free job's outcome failed with the held one: %v", answers[1].Err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, free.ID); n != 1 {
		t.Errorf("the free job has %d runs, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, held.ID); n != 0 {
		t.Errorf("the held job has %d runs, want none", n)
	}
}

// An outcome whose caller gave up before its batch was taken is not
// recorded: the caller got an error, so its node reports it again.
func TestBatcherSkipsAbandonedOutcomes(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	r := f.req(j, time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC), wire.ResultSuccess)
	b := f.st.NewOutcomeBatcher(store.BatchConfig{})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.RecordOutcome(gone, r.Node, r.JobID, r.Outcome); err == nil {
		t.Fatal("an abandoned caller was answered without error")
	}
	// A later outcome through the same batcher is recorded; the abandoned
	// one before it is not.
	r2 := f.req(j, time.Date(2026, 11, 20, 10, 1, 0, 0, time.UTC), wire.ResultSuccess)
	if _, err := b.RecordOutcome(context.Background(), r2.Node, r2.JobID, r2.Outcome); err != nil {
		t.Fatal(err)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 1 {
		t.Errorf("%d runs, want only the outcome whose caller waited", n)
	}
}
