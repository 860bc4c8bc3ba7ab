package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/quota"
	"github.com/hostcron/hostcron/internal/store"
)

func setRunNowQuota(t *testing.T, f *fixture, tenant string, perMinute int) {
	t.Helper()
	_, err := f.st.SetTenantQuotas(context.Background(), tenant, quota.Overrides{RunNowPerMinute: &perMinute})
	must(t, err)
}

// A tenant's run-nows and backfills share one bucket: the limit at once,
// then refused with the wait for the next token, and a refused request
// queues nothing and changes nothing but the bucket. Another tenant's
// bucket is its own, and 0 lifts the limit.
func TestRunNowQuotaRefusesPastTheBucket(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 3)
	j := f.job(5)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	f.sweepFrom(j.ID, slot.Add(-time.Hour))
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET created_at = $2 WHERE id = $1`, j.ID, slot.Add(-time.Hour))
	must(t, err)
	tasks := func() int {
		return f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now'`, j.ID)
	}
	for i := range 2 {
		if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil {
			t.Fatalf("run-now %d of 3: %v", i+1, err)
		}
	}
	if _, _, err := f.st.Backfill(ctx, j.ID, 0, slot); err != nil {
		t.Fatalf("backfill, the third request of 3: %v", err)
	}
	before, events := f.get(j.ID), f.count(`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1`, j.ID)
	var throttled *quota.Throttled
	for _, req := range []struct {
		name string
		do   func() error
	}{
		{"run-now", func() error { _, _, err := f.st.RunNow(ctx, j.ID, 0); return err }},
		{"backfill", func() error { _, _, err := f.st.Backfill(ctx, j.ID, 0, slot); return err }},
	} {
		err := req.do()
		if !errors.As(err, &throttled) {
			t.Fatalf("%s past the limit: %v, want throttled", req.name, err)
		}
		if throttled.Limit != 3 || throttled.Wait <= 0 || throttled.Wait > 20*time.Second {
			t.Fatalf("%s refused: %+v, want a wait of at most 20 s (3 a minute)", req.name, throttled)
		}
	}
	if n := tasks(); n != 3 {
		t.Fatalf("%d run-now tasks, want the 3 taken (a refused request queues nothing)", n)
	}
	after := f.get(j.ID)
	if after.Version != before.Version || f.count(`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1`, j.ID) != events {
		t.Fatalf("a refused request changed the job (version %d -> %d) or its events", before.Version, after.Version)
	}

	// Another tenant's requests take from its own bucket.
	other, err := f.st.CreateTenant(ctx, store.Tenant{Name: "other", ShardID: f.node.ShardID, LinuxUser: "other", LinuxGroup: "other"})
	must(t, err)
	wr, err := f.st.CreateWebroot(ctx, other.ID, "/srv/shared/www/other/public")
	must(t, err)
	oj, _, err := f.st.CreateJob(ctx, other.ID, store.JobFields{WebrootID: wr.ID, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	f.activate(oj.ID)
	if _, _, err := f.st.RunNow(ctx, oj.ID, 0); err != nil {
		t.Fatalf("another tenant's run-now: %v", err)
	}

	setRunNowQuota(t, f, f.tenant, 0)
	for i := range 5 {
		if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil {
			t.Fatalf("run-now %d with no limit: %v", i+1, err)
		}
	}
}

// Requests of one tenant arriving together on two core-api replicas, the
// tenant's first ever (no bucket yet), take exactly the limit between
// them: the bucket's row is read under its lock in a statement after the
// insert, so a request that waited on another's insert sees the row it
// committed instead of starting from a full bucket of its own.
func TestRunNowQuotaSharedByReplicas(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 3)
	j := f.job(5)
	replica, err := store.Open(ctx, f.st.Pool().Config().ConnString(), 8)
	must(t, err)
	defer replica.Close()

	// Insert the tenant's bucket in a transaction left open, as the first
	// request does, so that every racer's insert waits for it.
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	if _, err := tx.Exec(ctx, `INSERT INTO tenant_run_now_buckets (tenant_id, tokens, taken_at) VALUES ($1, 3, clock_timestamp())`, f.tenant); err != nil {
		t.Fatal(err)
	}
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		st := f.st
		if i%2 == 1 {
			st = replica
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = st.RunNow(ctx, j.ID, 0)
		}()
	}
	f.waitForLockWaiters("%INSERT INTO tenant_run_now_buckets%ON CONFLICT%", racers)
	must(t, tx.Commit(ctx))
	wg.Wait()
	taken, refused := 0, 0
	for _, err := range errs {
		var th *quota.Throttled
		switch {
		case err == nil:
			taken++
		case errors.As(err, &th):
			refused++
		default:
			t.Fatalf("run-now: %v", err)
		}
	}
	if taken != 3 || refused != racers-3 {
		t.Fatalf("%d taken, %d refused of %d racing requests under a limit of 3, want 3 taken", taken, refused, racers)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now'`, j.ID); n != 3 {
		t.Fatalf("%d run-now tasks queued, want 3", n)
	}
}

// holdBucket locks the tenant's run-now bucket in a transaction left
// open, as a slow request of the tenant does, and starts n run-nows of
// job id that wait behind it; release lets them go and returns their
// errors.
func (f *fixture) holdBucket(id string, n int) (release func() []error) {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.st.Pool().Begin(ctx)
	must(f.t, err)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tenant_run_now_buckets WHERE tenant_id = $1 FOR UPDATE`, f.tenant); err != nil {
		f.t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); _, _, errs[i] = f.st.RunNow(ctx, id, 0) }()
	}
	f.waitForLockWaiters("%tenant_run_now_buckets%FOR UPDATE%", n)
	return func() []error {
		must(f.t, tx.Rollback(ctx))
		wg.Wait()
		return errs
	}
}

// Run-nows waiting for their tenant's bucket, or refused, hold no lock on
// the job: its outcomes, edits (an admin's disable of the abusing job
// among them) and the sweeper write it. They held it FOR SHARE while they
// queued on the bucket, back to back, and a tenant's flood of refused
// run-nows stalled outcome batches other tenants' outcomes shared
// (review s21a).
func TestRunNowsWaitingForTheBucketHoldNoLockOnTheJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 1)
	j := f.job(5)
	if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil { // the bucket exists, empty
		t.Fatal(err)
	}
	release := f.holdBucket(j.ID, 4)
	err := pgx.BeginFunc(ctx, f.st.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, j.ID)
		return err
	})
	if err != nil {
		t.Errorf("a writer of the job behind run-nows waiting for the bucket: %v", err)
	}
	for _, err := range release() {
		var th *quota.Throttled
		if !errors.As(err, &th) {
			t.Errorf("run-now past the limit: %v, want throttled", err)
		}
	}
}

// A request that waited for the bucket decides by the limit in force
// when it gets it, not the one it read before: an admin's lowering
// holds the requests already waiting (review s21a).
func TestALoweredLimitHoldsTheRequestsWaiting(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 100)
	j := f.job(5)
	if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil { // the bucket exists: 99 left
		t.Fatal(err)
	}
	release := f.holdBucket(j.ID, 10)
	setRunNowQuota(t, f, f.tenant, 1) // the admin throttles the tenant hard
	taken := 0
	for _, err := range release() {
		if err == nil {
			taken++
		}
	}
	if taken > 1 {
		t.Errorf("%d of 10 run-nows waiting when the limit went down to 1 were queued, want at most 1", taken)
	}
}

// A run-now that waits for its job's lock (a sweep batch, an outcome
// batch, an edit holds the job) holds nothing of its tenant's: another
// job's run-now of the tenant is queued at once. The token is taken in a
// transaction of its own; in the job's, one job's writer stalled the
// tenant's run-nows of every job behind the bucket (review s21d).
func TestRunNowWaitingForItsJobHoldsNothingOfTheTenants(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 100)
	j1, j2 := f.job(5), f.job(5)
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, j1.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := f.st.RunNow(ctx, j1.ID, 0); done <- err }()
	f.waitForLockWaiters("%FOR SHARE%", 1)
	ctx2, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := f.st.RunNow(ctx2, j2.ID, 0); err != nil {
		t.Errorf("run-now of job 2 while job 1's run-now waits for job 1: %v, want it queued at once", err)
	}
	must(t, tx.Rollback(ctx))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A request that took its token and then found the job moved on (412,
// 409 under the lock) queues nothing and gives the token back: the
// tenant's next request is not refused for it.
func TestRunNowThatQueuesNothingGivesItsTokenBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	setRunNowQuota(t, f, f.tenant, 1)
	j := f.job(5)
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, j.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, _, err := f.st.RunNow(ctx, j.ID, j.Version); done <- err }()
	f.waitForLockWaiters("%FOR SHARE%", 1) // past its peek and its token
	if _, err := tx.Exec(ctx, `UPDATE cron_jobs SET version = version + 1 WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	must(t, tx.Commit(ctx))
	if err := <-done; !errors.Is(err, store.ErrPreconditionFailed) {
		t.Fatalf("run-now of a version the job left while it waited: %v, want precondition failed", err)
	}
	if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil {
		t.Fatalf("the next run-now under a limit of 1: %v, want the refunded token taken", err)
	}
}
