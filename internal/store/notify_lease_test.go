package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
)

// queue writes n webhook deliveries of run_failed events for a target
// (straight into the outbox: the claim is under test, not the events).
func (f *fixture) queue(tg store.NotificationTarget, n int) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `
		WITH ev AS (
			INSERT INTO notification_events (tenant_id, cron_job_id, kind, run_key, payload)
			SELECT $1, gen_random_uuid(), 'run_failed', 'k' || g || '-' || $2::text, '{}' FROM generate_series(1, $3) g
			RETURNING id)
		INSERT INTO notification_deliveries (event_id, target_id, tenant_id, channel)
		SELECT id, $2::uuid, $1, 'webhook' FROM ev`, tg.TenantID, tg.ID, n)
	must(f.t, err)
}

func byTarget(ds []store.Delivery) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.TargetID]++
	}
	return out
}

// A claim takes at most PerTarget of one target's deliveries and
// PerTenant of one tenant's, counting those already in flight, so a
// target with a backlog cannot fill the worker's slots.
func TestClaimCapsPerTargetAndTenant(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	slow := f.target(f.tenant, nil, "run_failed")
	other := f.target(f.tenant, nil, "run_failed")
	f.queue(slow, 10)
	f.queue(other, 2)
	claim := store.WebhookClaim{Limit: 20, Lease: time.Minute, PerTarget: 3, PerTenant: 100}
	ds, err := f.st.ClaimWebhookDeliveries(ctx, claim)
	must(t, err)
	if got := byTarget(ds); got[slow.ID] != 3 || got[other.ID] != 2 {
		t.Fatalf("first claim per target %v, want 3 of the backlog and both others", got)
	}
	// The slow target's three are in flight: it gets nothing more.
	if ds, err := f.st.ClaimWebhookDeliveries(ctx, claim); err != nil || len(ds) != 0 {
		t.Fatalf("second claim %v %v, want none while the cap is in flight", byTarget(ds), err)
	}
	// Recording one frees one place.
	_, err = f.st.RecordAttempt(ctx, ds[0].ID, ds[0].Lease, store.Attempt{State: notify.StateDelivered})
	must(t, err)
	again, err := f.st.ClaimWebhookDeliveries(ctx, claim)
	must(t, err)
	if len(again) != 1 || again[0].TargetID != ds[0].TargetID && ds[0].TargetID == slow.ID {
		t.Errorf("after one was recorded: %v", byTarget(again))
	}
	// The tenant cap counts across its targets.
	g := newFixture(t)
	a, b := g.target(g.tenant, nil, "run_failed"), g.target(g.tenant, nil, "run_failed")
	g.queue(a, 5)
	g.queue(b, 5)
	ds, err = g.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 20, Lease: time.Minute, PerTarget: 4, PerTenant: 6})
	must(t, err)
	if len(ds) != 6 {
		t.Errorf("tenant cap 6: claimed %v", byTarget(ds))
	}
}

// Every claim takes a new lease token; an attempt recorded with a token
// that is no longer the delivery's (the lease ran out and another worker
// claimed it) changes nothing, and the holder's own record applies.
func TestStaleLeaseRecordsNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.target(f.tenant, nil, "run_failed")
	f.queue(tg, 1)
	first, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 1, Lease: time.Millisecond})
	must(t, err)
	time.Sleep(20 * time.Millisecond) // the lease runs out
	second, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 1, Lease: time.Minute})
	must(t, err)
	if len(first) != 1 || len(second) != 1 || first[0].ID != second[0].ID || first[0].Lease == second[0].Lease {
		t.Fatalf("claims %+v / %+v: want the same delivery under two tokens", first, second)
	}
	rec, err := f.st.RecordAttempt(ctx, first[0].ID, first[0].Lease, store.Attempt{State: notify.StateFailed, Error: "stale"})
	must(t, err)
	views, err := f.st.ListDeliveries(ctx, tg.ID, 0, 10)
	must(t, err)
	if rec.Applied || views[0].State != "pending" || views[0].Attempts != 0 || views[0].LastError != "" {
		t.Fatalf("stale record applied=%v: %+v", rec.Applied, views[0])
	}
	if ok, err := f.st.DeferDelivery(ctx, first[0].ID, first[0].Lease, time.Hour); err != nil || ok {
		t.Errorf("stale defer: %v %v", ok, err)
	}
	rec, err = f.st.RecordAttempt(ctx, second[0].ID, second[0].Lease, store.Attempt{State: notify.StateDelivered})
	must(t, err)
	if views, _ := f.st.ListDeliveries(ctx, tg.ID, 0, 10); !rec.Applied || views[0].State != "delivered" || views[0].Attempts != 1 {
		t.Errorf("holder's record applied=%v: %+v", rec.Applied, views[0])
	}
}

// Failed attempts count up on the target; a delivery resets it. Pausing
// a target pushes its due deliveries back, not those in flight.
func TestTargetFailuresAndPause(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.target(f.tenant, nil, "run_failed")
	f.queue(tg, 4)
	ds, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 2, Lease: time.Minute})
	must(t, err)
	var rec store.Recorded
	for _, d := range ds {
		rec, err = f.st.RecordAttempt(ctx, d.ID, d.Lease, store.Attempt{State: notify.StatePending, RetryIn: 0})
		must(t, err)
	}
	if rec.TargetFailures != 2 {
		t.Errorf("failures %d, want 2", rec.TargetFailures)
	}
	must(t, f.st.PauseTarget(ctx, tg.ID, time.Hour))
	if n := f.count(`SELECT count(*) FROM notification_deliveries WHERE next_attempt_at > now() + interval '50 minutes'`); n != 4 {
		t.Errorf("%d deliveries paused, want 4", n)
	}
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, `UPDATE notification_deliveries SET next_attempt_at = now()`)
	must(t, err)
	ds, err = f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 1, Lease: time.Minute})
	must(t, err)
	rec, err = f.st.RecordAttempt(ctx, ds[0].ID, ds[0].Lease, store.Attempt{State: notify.StateDelivered})
	must(t, err)
	if rec.TargetFailures != 0 {
		t.Errorf("failures after a delivery %d, want 0", rec.TargetFailures)
	}
}
