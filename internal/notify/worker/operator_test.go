package worker_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/notify/worker"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// platformError records a platform_error outcome of the job.
func (f *fixture) platformError() {
	f.t.Helper()
	f.slot = f.slot.Add(time.Minute)
	_, err := f.st.RecordOutcome(context.Background(), f.node, f.job.ID, store.Outcome{
		RunKey: runkey.Scheduled(f.job.ID, f.slot), Version: f.job.Version, ScheduledAt: f.slot,
		Result: wire.ResultPlatformError, FailureReason: "shared storage: stale file handle"})
	must(f.t, err)
}

// An operator webhook is delivered signed with the target's secret, as a
// tenant's is, and carries the shard, not a tenant or a job: the window's
// platform errors in one event.
func TestOperatorWebhookSigned(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	tg, err := f.st.CreateOperatorTarget(ctx, store.NotificationTarget{Kind: "webhook", URL: srv.URL + "/ops",
		Secret: "operator-secret", Events: []string{"platform_error"}})
	must(t, err)
	f.platformError()
	f.platformError()
	w := newWorker(f, true)
	w.Pass(ctx)
	w.Pass(ctx)
	if rcv.count() != 1 {
		t.Fatalf("receiver got %d requests, want 1", rcv.count())
	}
	req, body := rcv.got[0], rcv.bodies[0]
	if err := notify.Verify([]byte("operator-secret"), body, req.Header.Get(notify.SignatureHeader), time.Now()); err != nil {
		t.Errorf("signature: %v", err)
	}
	var b worker.Body
	must(t, json.Unmarshal(body, &b))
	if b.Kind != "platform_error" || b.ShardID != f.node.ShardID || b.TenantID != "" || b.CronJobID != "" ||
		req.Header.Get(worker.EventKindHeader) != "platform_error" || strings.Contains(string(body), `"tenant_id":""`) {
		t.Errorf("body %s, headers %v", body, req.Header)
	}
	var data struct {
		Count    int              `json:"count"`
		Examples []map[string]any `json:"examples"`
	}
	must(t, json.Unmarshal(b.Data, &data))
	if data.Count != 2 || len(data.Examples) != 2 || data.Examples[0]["failure_reason"] != "shared storage: stale file handle" {
		t.Errorf("data %s", b.Data)
	}
	if ds := f.deliveries(tg.ID); len(ds) != 1 || ds[0].State != "delivered" {
		t.Errorf("deliveries %+v", ds)
	}
}

// Operator e-mail has its own rate window: it neither spends the
// tenant's budget nor waits for it.
func TestOperatorMailHasItsOwnBudget(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: f.tenant, Kind: "email", Address: "ops@acme.example",
		Events: []string{"run_failed"}})
	must(t, err)
	_, err = f.st.CreateOperatorTarget(ctx, store.NotificationTarget{Kind: "email", Address: "oncall@platform.example",
		Events: []string{"platform_error"}})
	must(t, err)
	m := &fakeMailer{}
	w := &worker.Worker{Store: f.st, Mailer: m, MailLimit: 1, Rand: func() float64 { return 0 }}
	f.fail()
	f.fail()
	f.platformError()
	w.Pass(ctx)
	var toOps, toTenant int
	for _, msg := range m.sent {
		switch msg.To {
		case "oncall@platform.example":
			toOps++
			if !strings.Contains(msg.Subject, `Shard "web-1": 1 platform errors`) || !strings.Contains(msg.Body, "Occurrences") {
				t.Errorf("operator mail %q\n%s", msg.Subject, msg.Body)
			}
		case "ops@acme.example":
			toTenant++
		}
	}
	if toOps != 1 || toTenant != 1 {
		t.Errorf("sent %d to the operator and %d to the tenant, want 1 and 1 (the tenant's limit)", toOps, toTenant)
	}
	var windows int
	must(t, f.st.Pool().QueryRow(ctx, `SELECT count(*) FROM notification_mail_windows WHERE tenant_id = $1 AND sent = 1`,
		store.OperatorMailKey).Scan(&windows))
	if windows != 1 {
		t.Error("the operator's mail was not counted in its own window")
	}
}
