package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

func (f *fixture) target(tenant string, job *string, events ...string) store.NotificationTarget {
	f.t.Helper()
	t, err := f.st.CreateTarget(context.Background(), store.NotificationTarget{TenantID: tenant, CronJobID: job,
		Kind: "webhook", URL: "https://hooks.example.com/" + tenant, Secret: "s", Events: events})
	must(f.t, err)
	return t
}

// kinds lists the kinds a target's deliveries are of, by run record
// and kind: the events of one outcome are written by one statement, in no
// particular order.
func (f *fixture) kinds(targetID string) []string {
	f.t.Helper()
	rows, err := f.st.Pool().Query(context.Background(), `SELECT e.kind FROM notification_deliveries d
		JOIN notification_events e ON e.id = d.event_id WHERE d.target_id = $1 ORDER BY e.run_id, e.kind`, targetID)
	must(f.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		must(f.t, rows.Scan(&k))
		out = append(out, k)
	}
	return out
}

var allKinds = []string{"run_failed", "recovered", "disable_warning", "auto_disabled", "lost"}

// A job failing to its threshold emits each failure, the warning and the
// disable, once each; a redelivered outcome emits nothing; a success after
// failures (on another job) emits recovered.
func TestOutcomeEmitsNotifications(t *testing.T) {
	f := newFixture(t)
	j := f.job(3)
	all := f.target(f.tenant, nil, allKinds...)
	only := f.target(f.tenant, &j.ID, "auto_disabled")
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 3; i++ {
		f.outcome(j, s0.Add(time.Duration(i)*time.Minute), wire.ResultExitCode)
	}
	if res := f.outcome(j, s0.Add(2*time.Minute), wire.ResultExitCode); !res.Duplicate {
		t.Fatalf("redelivery: %+v", res)
	}
	want := []string{"run_failed", "disable_warning", "run_failed", "auto_disabled", "run_failed"}
	if got := f.kinds(all.ID); !slices.Equal(got, want) {
		t.Errorf("tenant target got %v, want %v", got, want)
	}
	if got := f.kinds(only.ID); !slices.Equal(got, []string{"auto_disabled"}) {
		t.Errorf("job target subscribed to auto_disabled got %v", got)
	}

	k := f.job(5)
	f.outcome(k, s0, wire.ResultTimeout)
	f.outcome(k, s0.Add(time.Minute), wire.ResultPlatformError) // the platform's: nothing
	f.outcome(k, s0.Add(2*time.Minute), wire.ResultSuccess)
	f.outcome(k, s0.Add(3*time.Minute), wire.ResultSuccess)
	want = append(want, "run_failed", "recovered")
	if got := f.kinds(all.ID); !slices.Equal(got, want) {
		t.Errorf("after the second job: %v, want %v", got, want)
	}
	if got := f.kinds(only.ID); len(got) != 1 {
		t.Errorf("the first job's target got the second job's events: %v", got)
	}
	var payload string
	must(t, f.st.Pool().QueryRow(context.Background(), `SELECT payload::text FROM notification_events
		WHERE cron_job_id = $1 AND kind = 'auto_disabled'`, j.ID).Scan(&payload))
	if !strings.Contains(payload, `"consecutive_failures": 3`) || !strings.Contains(payload, `"job_status": "auto_disabled"`) {
		t.Errorf("payload %s", payload)
	}
}

// Nobody subscribed: no event is written at all (the run's transaction
// stays one cheap statement), and another tenant's target gets nothing.
func TestNotificationsStayInTheirTenant(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sh, err := f.st.ShardIDs(ctx)
	must(t, err)
	other, err := f.st.CreateTenant(ctx, store.Tenant{Name: "other", ShardID: sh[0], LinuxUser: "other", LinuxGroup: "other"})
	must(t, err)
	j := f.job(3)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(j, s0, wire.ResultExitCode)
	if n := f.count(`SELECT count(*) FROM notification_events`); n != 0 {
		t.Errorf("%d events without targets", n)
	}
	theirs := f.target(other.ID, nil, allKinds...)
	f.outcome(j, s0.Add(time.Minute), wire.ResultExitCode)
	if got := f.kinds(theirs.ID); len(got) != 0 {
		t.Errorf("another tenant's target got %v", got)
	}
	if _, err := f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: other.ID, CronJobID: &j.ID, Kind: "webhook",
		URL: "https://x.example/", Events: allKinds}); err == nil {
		t.Error("a target for another tenant's job was created")
	}
}

// The sweeper's lost runs notify in the sweep's transaction, once.
func TestSweepEmitsLost(t *testing.T) {
	f := newFixture(t)
	j := f.job(3)
	tg := f.target(f.tenant, nil, "lost")
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(j.ID, s0.Add(time.Second))
	f.outcome(j, s0, wire.ResultSuccess)
	now := s0.Add(3*time.Minute + 2*time.Minute + time.Second)
	rep, err := f.st.SweepLostRuns(context.Background(), now, time.Minute)
	must(t, err)
	if rep.Lost == 0 {
		t.Fatal("no lost run")
	}
	_, err = f.st.SweepLostRuns(context.Background(), now, time.Minute)
	must(t, err)
	if got := f.kinds(tg.ID); len(got) != rep.Lost || got[0] != "lost" {
		t.Errorf("lost deliveries %v, want %d", got, rep.Lost)
	}
}

// Claims lease deliveries (a second claim gets none); attempts record
// delivery, retries and failure; deleting the target deletes its
// deliveries; retention prunes finished ones.
func TestDeliveryLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	tg := f.target(f.tenant, nil, "run_failed")
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(j, s0, wire.ResultExitCode)
	f.outcome(j, s0.Add(time.Minute), wire.ResultExitCode)
	ds, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 10, Lease: time.Minute})
	must(t, err)
	if len(ds) != 2 || ds[0].URL != tg.URL || ds[0].Secret != "s" || ds[0].Kind != "run_failed" {
		t.Fatalf("claimed %+v", ds)
	}
	if again, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 10, Lease: time.Minute}); err != nil || len(again) != 0 {
		t.Fatalf("second claim: %v %v", again, err)
	}
	status := 200
	_, err = f.st.RecordAttempt(ctx, ds[0].ID, ds[0].Lease, store.Attempt{State: notify.StateDelivered, Status: &status})
	must(t, err)
	_, err = f.st.RecordAttempt(ctx, ds[1].ID, ds[1].Lease, store.Attempt{State: notify.StatePending, RetryIn: time.Hour, Error: "boom"})
	must(t, err)
	views, err := f.st.ListDeliveries(ctx, tg.ID, 0, 10)
	must(t, err)
	if len(views) != 2 || views[0].State != "pending" || views[0].Attempts != 1 || views[0].LastError != "boom" ||
		views[1].State != "delivered" || views[1].DeliveredAt == nil || views[0].JobName != j.Name {
		t.Errorf("views %+v", views)
	}
	if n, err := f.st.PendingDeliveries(ctx); err != nil || n != 1 {
		t.Errorf("pending %d %v", n, err)
	}
	n, err := f.st.PruneNotifications(ctx, time.Now().Add(time.Hour))
	must(t, err)
	if n != 2 {
		t.Errorf("pruned %d, want the delivered one and its event", n)
	}
	must(t, f.st.DeleteTarget(ctx, tg.ID))
	if n := f.count(`SELECT count(*) FROM notification_deliveries`); n != 0 {
		t.Errorf("%d deliveries of a deleted target", n)
	}
}

// A slot of a job with a catch-up window is not swept as lost before its
// catch-up could have run and reported: slot + window + timeout (+ grace).
func TestSweepWaitsOutTheCatchUpWindow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3) // every minute, 60 s timeout
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET catchup_window_seconds = 600 WHERE id = $1`, j.ID)
	must(t, err)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(j.ID, s0.Add(-time.Second))
	lostOf := func() int {
		return f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost' AND scheduled_at = $2`, j.ID, s0)
	}
	// Past slot + timeout + grace, inside the window: not lost yet.
	_, err = f.st.SweepLostRuns(ctx, s0.Add(time.Minute+2*time.Minute), time.Minute)
	must(t, err)
	if n := lostOf(); n != 0 {
		t.Fatalf("slot %s recorded lost %d time(s) while its catch-up could still run", s0, n)
	}
	// Past slot + window + timeout + grace: lost.
	_, err = f.st.SweepLostRuns(ctx, s0.Add(10*time.Minute+time.Minute+time.Minute+time.Second), time.Minute)
	must(t, err)
	if n := lostOf(); n != 1 {
		t.Fatalf("slot %s recorded lost %d time(s) after its window, want 1", s0, n)
	}
}

// A slot of a buffer_one job is not swept as lost while it may still be
// waiting for the previous run and then running: slot + wait + timeout
// (+ grace), the wait being jobspec.StartWaitSec. A slot that waited W
// and ran D reports at slot + W + D.
func TestSweepWaitsOutTheOverlapWait(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3) // every minute, 60 s timeout
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET overlap_policy = 'buffer_one' WHERE id = $1`, j.ID)
	must(t, err)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.sweepFrom(j.ID, s0.Add(-time.Second))
	lostOf := func() int {
		return f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost' AND scheduled_at = $2`, j.ID, s0)
	}
	wait := time.Duration(jobspec.StartWaitSec(wire.OverlapBufferOne, 0, 60)) * time.Second
	// Waited 100 s, ran its 60 s: past slot + timeout + grace, not lost.
	_, err = f.st.SweepLostRuns(ctx, s0.Add(100*time.Second+time.Minute+time.Minute), time.Minute)
	must(t, err)
	if n := lostOf(); n != 0 {
		t.Fatalf("slot %s recorded lost %d time(s) while it could still wait and run", s0, n)
	}
	// Past slot + wait + timeout + grace: lost.
	_, err = f.st.SweepLostRuns(ctx, s0.Add(wait+time.Minute+time.Minute+time.Second), time.Minute)
	must(t, err)
	if n := lostOf(); n != 1 {
		t.Fatalf("slot %s recorded lost %d time(s) after its longest wait and run, want 1", s0, n)
	}
}
