package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/notify/worker"
	"github.com/hostcron/hostcron/internal/store"
)

// queueHeld writes n held e-mail deliveries, due now, for a target.
func (f *fixture) queueHeld(tg store.NotificationTarget, kind string, n int) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `
		WITH ev AS (
			INSERT INTO notification_events (tenant_id, cron_job_id, kind, run_key, payload)
			SELECT $1, gen_random_uuid(), $4, 'k' || g || '-' || $2::text, '{"job_name":"q","result":"exit_code"}'
			FROM generate_series(1, $3) g RETURNING id)
		INSERT INTO notification_deliveries (event_id, target_id, tenant_id, channel, state)
		SELECT id, $2::uuid, $1, 'email', CASE WHEN $4 = 'lost' THEN 'pending' ELSE 'held' END FROM ev`,
		tg.TenantID, tg.ID, n, kind)
	must(f.t, err)
}

func (f *fixture) emailTarget(addr string) store.NotificationTarget {
	f.t.Helper()
	tg, err := f.st.CreateTarget(context.Background(), store.NotificationTarget{TenantID: f.tenant, Kind: "email",
		Address: addr, Events: []string{"run_failed", "lost"}})
	must(f.t, err)
	return tg
}

func (f *fixture) windowSent() int {
	f.t.Helper()
	var n int
	must(f.t, f.st.Pool().QueryRow(context.Background(), `SELECT coalesce(sum(sent), 0) FROM notification_mail_windows`).Scan(&n))
	return n
}

func states(ds []store.DeliveryView) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[d.State]++
	}
	return out
}

// A held backlog larger than a claim batch goes out as ONE digest per
// address (up to DigestMax, the rest counted as "and N more"), costing
// one mail of the budget.
func TestHeldBacklogIsOneDigest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.emailTarget("ops@acme.example")
	f.queueHeld(tg, "run_failed", 45)
	m := &fakeMailer{}
	w := &worker.Worker{Store: f.st, Mailer: m, MailLimit: 5, Batch: 20, DigestMax: 40, Rand: func() float64 { return 0 }}
	w.Pass(ctx)
	if len(m.sent) != 1 || !strings.Contains(m.sent[0].Subject, "45 notifications") ||
		!strings.Contains(m.sent[0].Body, "... and 5 more") {
		t.Fatalf("want one digest of 40 saying 5 more, got %d mails: %+v", len(m.sent), m.sent)
	}
	if got := states(f.deliveries(tg.ID)); got["delivered"] != 40 || got["held"] != 5 {
		t.Errorf("states %v, want 40 delivered, 5 still held", got)
	}
	if n := f.windowSent(); n != 1 {
		t.Errorf("window charged %d mails, want 1", n)
	}
}

// The budget counts mails sent: a mail the relay did not take is given
// back. lost events are not mails of their own: they wait, held, for the
// window's digest.
func TestMailBudgetChargesOnlySentAndNotLost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg := f.emailTarget("ops@acme.example")
	m := &fakeMailer{err: errors.New("421 try later")}
	w := &worker.Worker{Store: f.st, Mailer: m, MailLimit: 2, Rand: func() float64 { return 0 }}
	f.fail()
	w.Pass(ctx)
	if len(m.sent) != 1 || f.windowSent() != 0 {
		t.Fatalf("after a failed send: %d tries, window sent %d, want 1 and 0", len(m.sent), f.windowSent())
	}
	m.err = nil
	tries := len(m.sent)
	f.queueHeld(tg, mail.KindLost, 3)
	w.Pass(ctx)
	if n := f.windowSent(); n != 0 || len(m.sent) != tries {
		t.Errorf("lost events: window sent %d, %d mails, want none: they wait for the digest", n, len(m.sent)-tries)
	}
	if got := states(f.deliveries(tg.ID)); got["held"] != 3 {
		t.Errorf("lost deliveries %v, want all 3 held for the window's digest", got)
	}
}

// cancellingMailer takes the first mail, then cancels the worker's
// context, as a SIGTERM arriving while the relay answered would.
type cancellingMailer struct {
	cancel context.CancelFunc
	sent   int
}

func (m *cancellingMailer) Send(context.Context, mail.Message) error {
	m.sent++
	m.cancel()
	return nil
}

// TestMailShutdownMidPlan: a plan cut short by shutdown records the mail
// the relay took (so it is never sent again) and hands the rest back at
// once, due and unattempted, with their budget: the plan's long lease must
// not hold a tenant's mail through a rolling deploy.
func TestMailShutdownMidPlan(t *testing.T) {
	f := newFixture(t)
	f.emailTarget("ops@acme.example")
	for i := 0; i < 3; i++ {
		f.fail()
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &cancellingMailer{cancel: cancel}
	w := &worker.Worker{Store: f.st, Mailer: m, MailLimit: 10, Rand: func() float64 { return 0 }}
	w.Pass(ctx)
	ds := f.deliveriesOf(t, "email")
	got := states(ds)
	if m.sent != 1 || got["delivered"] != 1 || got["pending"] != len(ds)-1 {
		t.Fatalf("after shutdown mid-plan: %d sent, states %v, want 1 sent and recorded, the rest pending", m.sent, got)
	}
	for _, d := range ds {
		if d.State == "pending" && (d.Attempts != 0 || d.NextAttemptAt == nil || time.Until(*d.NextAttemptAt) > time.Second) {
			t.Errorf("delivery %+v: want handed back due now, unattempted", d)
		}
	}
	if n := f.windowSent(); n != 1 {
		t.Errorf("window charged %d mails, want only the one sent", n)
	}
}
