package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

func (f *fixture) operatorTarget(shard *string, events ...string) store.NotificationTarget {
	f.t.Helper()
	t, err := f.st.CreateOperatorTarget(context.Background(), store.NotificationTarget{ShardID: shard,
		Kind: "webhook", URL: "https://ops.example.com/hook", Secret: "s", Events: events})
	must(f.t, err)
	return t
}

// opPayload is an operator event's payload.
type opPayload struct {
	ShardID  string           `json:"shard_id"`
	Count    int              `json:"count"`
	Examples []map[string]any `json:"examples"`
}

// opEvents returns the operator events of a kind, oldest first.
func (f *fixture) opEvents(kind string) []opPayload {
	f.t.Helper()
	rows, err := f.st.Pool().Query(context.Background(), `SELECT payload FROM notification_events
		WHERE cron_job_id IS NULL AND kind = $1 ORDER BY id`, kind)
	must(f.t, err)
	defer rows.Close()
	var out []opPayload
	for rows.Next() {
		var b []byte
		must(f.t, rows.Scan(&b))
		var p opPayload
		must(f.t, json.Unmarshal(b, &p))
		out = append(out, p)
	}
	return out
}

// Platform errors of a shard make one event per window, counting them,
// with a few examples; one delivery per subscribed operator target, none
// for a tenant's target, and tenant kinds never reach the operator.
func TestPlatformErrorsAggregatePerShardWindow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other, err := f.st.CreateShard(ctx, "web-2", "/srv/shared/www2")
	must(t, err)
	all := f.operatorTarget(nil, "platform_error", "slots_unrun")
	mine := f.operatorTarget(&f.node.ShardID, "platform_error")
	theirs := f.operatorTarget(&other.ID, "platform_error")
	tenants := f.target(f.tenant, nil, allKinds...)
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	j, k := f.job(3), f.job(3)
	for i := 0; i < 4; i++ {
		f.outcome(j, s0.Add(time.Duration(i)*time.Minute), wire.ResultPlatformError)
		f.outcome(k, s0.Add(time.Duration(i)*time.Minute), wire.ResultPlatformError)
	}
	f.outcome(j, s0, wire.ResultPlatformError)                // a redelivery: not counted
	f.outcome(j, s0.Add(10*time.Minute), wire.ResultExitCode) // the tenant's: not the operator's
	evs := f.opEvents("platform_error")
	if len(evs) != 1 {
		// A window boundary between the outcomes would make two; the
		// test's outcomes take well under a second.
		t.Fatalf("%d platform_error events, want 1", len(evs))
	}
	if evs[0].Count != 8 || len(evs[0].Examples) != notify.MaxExamples || evs[0].ShardID != f.node.ShardID {
		t.Errorf("event %+v", evs[0])
	}
	if ex := evs[0].Examples[0]; ex["cron_job_id"] != j.ID || ex["node_id"] != f.node.ID || ex["tenant_id"] != f.tenant {
		t.Errorf("first example %v", ex)
	}
	for _, c := range []struct {
		tg   store.NotificationTarget
		want int
	}{{all, 1}, {mine, 1}, {theirs, 0}} {
		if got := f.kinds(c.tg.ID); len(got) != c.want {
			t.Errorf("operator target %v got %v, want %d", c.tg.ShardID, got, c.want)
		}
	}
	if got := f.kinds(tenants.ID); len(got) != 1 || got[0] != "run_failed" {
		t.Errorf("tenant target got %v, want only its run_failed", got)
	}
	if n := f.count(`SELECT count(*) FROM notification_deliveries d JOIN notification_events e ON e.id = d.event_id
		WHERE e.cron_job_id IS NULL AND d.tenant_id IS NOT NULL`); n != 0 {
		t.Errorf("%d operator deliveries carry a tenant (its caps, its mail budget)", n)
	}
	ds, err := f.st.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: 10, Lease: time.Minute, PerTenant: 1})
	must(t, err)
	ops := 0
	for _, d := range ds {
		if d.CronJobID == "" {
			ops++
			if d.TenantID != "" || d.ShardID != f.node.ShardID || d.Kind != "platform_error" {
				t.Errorf("claimed operator delivery %+v", d)
			}
		}
	}
	// The operator is a group of its own under the per-tenant cap: the
	// tenant's one in flight does not hold back the operator's.
	if ops != 1 || len(ds) != 2 {
		t.Errorf("claimed %d operator deliveries of %d, want 1 of 2", ops, len(ds))
	}
	views, err := f.st.ListDeliveries(ctx, all.ID, 0, 10)
	must(t, err)
	if len(views) != 1 || views[0].ShardID != f.node.ShardID || views[0].CronJobID != "" {
		t.Errorf("operator deliveries %+v", views)
	}
}

// Without an operator target nothing is written; targets are listed apart
// from tenants', and a shard that does not exist is refused.
func TestOperatorTargets(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(f.job(3), s0, wire.ResultPlatformError)
	if n := f.count(`SELECT count(*) FROM notification_events`); n != 0 {
		t.Errorf("%d events without targets", n)
	}
	op := f.operatorTarget(nil, "node_not_converged")
	f.target(f.tenant, nil, "lost")
	ops, err := f.st.ListOperatorTargets(ctx)
	must(t, err)
	if len(ops) != 1 || ops[0].ID != op.ID || ops[0].TenantID != "" {
		t.Errorf("operator targets %+v", ops)
	}
	ts, err := f.st.ListTargets(ctx, f.tenant)
	must(t, err)
	if len(ts) != 1 || ts[0].ID == op.ID {
		t.Errorf("tenant targets %+v", ts)
	}
	missing := "7b0e5c3a-55a4-4bb7-9c53-2f8c1b1d0a11"
	if _, err := f.st.CreateOperatorTarget(ctx, store.NotificationTarget{ShardID: &missing, Kind: "webhook",
		URL: "https://x.example/", Events: []string{"platform_error"}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a target for a missing shard: %v", err)
	}
}

// A sweep's lost runs make one slots_unrun per shard and window, counting
// them; a second sweep in the window adds to it.
func TestSweepEmitsSlotsUnrun(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.operatorTarget(nil, "slots_unrun")
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	j, k := f.job(3), f.job(3)
	f.sweepFrom(j.ID, s0.Add(time.Second))
	f.sweepFrom(k.ID, s0.Add(time.Second))
	rep, err := f.st.SweepLostRuns(ctx, s0.Add(5*time.Minute), time.Minute)
	must(t, err)
	if rep.Lost < 2 {
		t.Fatalf("lost %d", rep.Lost)
	}
	rep2, err := f.st.SweepLostRuns(ctx, s0.Add(7*time.Minute), time.Minute)
	must(t, err)
	evs := f.opEvents("slots_unrun")
	if len(evs) != 1 || evs[0].Count != rep.Lost+rep2.Lost || len(evs[0].Examples) != 4 { // two jobs in each sweep
		t.Fatalf("slots_unrun events %+v, want one counting %d", evs, rep.Lost+rep2.Lost)
	}
	if got := f.kinds(tg.ID); len(got) != 1 {
		t.Errorf("deliveries %v, want one", got)
	}
}

// A failed converge emits node_not_converged at once; the periodic check
// finds a node that stopped converging, once per window however often it
// runs; a success clears the node.
func TestNodeNotConverged(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.operatorTarget(&f.node.ShardID, "node_not_converged")
	must(t, f.st.RecordConverge(ctx, f.node.ID, ""))
	now := time.Now()
	if n, err := f.st.CheckConvergence(ctx, now, notify.ConvergeThreshold); err != nil || n != 0 {
		t.Fatalf("a converged node reported: %d %v", n, err)
	}
	must(t, f.st.RecordConverge(ctx, f.node.ID, "reconcile node: activity timeout"))
	evs := f.opEvents("node_not_converged")
	if len(evs) != 1 || evs[0].Count != 1 || evs[0].Examples[0]["node_id"] != f.node.ID {
		t.Fatalf("after a failure: %+v", evs)
	}
	for i := 0; i < 3; i++ {
		if n, err := f.st.CheckConvergence(ctx, now, notify.ConvergeThreshold); err != nil || n != 1 {
			t.Fatalf("check: %d %v", n, err)
		}
	}
	if evs = f.opEvents("node_not_converged"); len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("repeated checks in the window: %+v", evs)
	}
	if n, err := f.st.CheckConvergence(ctx, now.Add(notify.OperatorWindow), notify.ConvergeThreshold); err != nil || n != 1 {
		t.Fatalf("next window: %d %v", n, err)
	}
	if evs = f.opEvents("node_not_converged"); len(evs) != 2 {
		t.Errorf("the next window made %d events, want 2 in all", len(evs))
	}
	if got := f.kinds(tg.ID); len(got) != 2 {
		t.Errorf("deliveries %v", got)
	}
	must(t, f.st.RecordConverge(ctx, f.node.ID, ""))
	if n, err := f.st.CheckConvergence(ctx, now, notify.ConvergeThreshold); err != nil || n != 0 {
		t.Errorf("after a success: %d %v", n, err)
	}
	if n, err := f.st.CheckConvergence(ctx, now.Add(time.Hour), notify.ConvergeThreshold); err != nil || n != 1 {
		t.Errorf("an hour without a converge: %d %v", n, err)
	}
	must(t, f.st.RecordConverge(ctx, "7b0e5c3a-55a4-4bb7-9c53-2f8c1b1d0a11", "gone")) // a deleted node: no error
}

// An outcome's platform_error does not wait for another transaction that
// holds the window's event (a shard-wide fault's outcomes would run one at
// a time, each through its commit): it skips the count and records its run.
func TestPlatformErrorDoesNotQueueOnTheWindowsEvent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.operatorTarget(nil, "platform_error")
	s0 := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	j := f.job(3)
	f.outcome(j, s0, wire.ResultPlatformError) // the window's event exists
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT id FROM notification_events WHERE cron_job_id IS NULL FOR UPDATE`)
	must(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: runkey.Scheduled(j.ID, s0.Add(time.Minute)),
			Version: j.Version, ScheduledAt: s0.Add(time.Minute), Result: wire.ResultPlatformError, FailureReason: "storage hung"})
		done <- err
	}()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the outcome waited for the transaction holding the window's event")
	}
	must(t, tx.Rollback(ctx))
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'platform_error'`, j.ID); n != 2 {
		t.Errorf("%d platform_error runs recorded, want 2", n)
	}
}
