package worker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/notify/worker"
	"github.com/hostcron/hostcron/internal/store"
)

// queue writes n webhook deliveries of run_failed events for a target
// straight into the outbox (the delivery loop is under test).
func (f *fixture) queue(tg store.NotificationTarget, n int) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `
		WITH ev AS (
			INSERT INTO notification_events (tenant_id, cron_job_id, kind, run_key, payload)
			SELECT $1, gen_random_uuid(), 'run_failed', 'k' || g || '-' || $2::text, '{"job_name":"q"}'
			FROM generate_series(1, $3) g RETURNING id)
		INSERT INTO notification_deliveries (event_id, target_id, tenant_id, channel)
		SELECT id, $2::uuid, $1, 'webhook' FROM ev`, tg.TenantID, tg.ID, n)
	must(f.t, err)
}

// otherTenant makes a second tenant with a webhook target at url.
func (f *fixture) otherTenant(url string) store.NotificationTarget {
	f.t.Helper()
	ctx := context.Background()
	sh, err := f.st.CreateShard(ctx, "web-2", "/srv/shared/www2")
	must(f.t, err)
	tn, err := f.st.CreateTenant(ctx, store.Tenant{Name: "globex", ShardID: sh.ID, LinuxUser: "globex", LinuxGroup: "globex"})
	must(f.t, err)
	tg, err := f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: tn.ID, Kind: "webhook", URL: url,
		Secret: "topsecret", Events: []string{"run_failed"}})
	must(f.t, err)
	return tg
}

// One tenant's receiver that hangs (until the test ends) holds a few
// send slots, not the worker: another tenant's events, queued after the
// hanging ones, are delivered while it still hangs.
func TestSlowTargetDoesNotStallOthers(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	var hung sync.WaitGroup
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release) // before slow.Close, which waits for the handlers
	healthy := &receiver{}
	fast := httptest.NewServer(healthy)
	defer fast.Close()

	f.queue(f.webhook(slow.URL), 30)
	f.queue(f.otherTenant(fast.URL), 5)
	ctx, cancel := context.WithCancel(context.Background())
	w := newWorker(f, true)
	w.Interval = 20 * time.Millisecond
	hung.Add(1)
	go func() { defer hung.Done(); w.Run(ctx) }()
	defer func() { cancel(); hung.Wait() }()

	deadline := time.Now().Add(5 * time.Second) // the hanging attempts last worker.Timeout (10 s)
	for healthy.count() < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := healthy.count(); n != 5 {
		t.Fatalf("the healthy tenant got %d of 5 events while another's receiver hung", n)
	}
}

// slowMailer takes delay per mail (or until its context ends) and
// counts what it sent by Message-ID.
type slowMailer struct {
	delay time.Duration
	mu    sync.Mutex
	sent  map[string]int
}

func (m *slowMailer) Send(ctx context.Context, msg mail.Message) error {
	select {
	case <-time.After(m.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent[msg.ID]++
	return nil
}

func (m *slowMailer) counts() (mails, distinct int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.sent {
		mails += n
	}
	return mails, len(m.sent)
}

// Two replicas (two store handles on one database) with a slow relay and
// a short webhook lease: a plan's mails are leased for all of them, so
// each event's mail is sent once.
func TestMailTwoWorkersSendOnce(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: f.tenant, Kind: "email", Address: "ops@acme.example",
		Events: []string{"run_failed"}})
	must(t, err)
	for range 6 {
		f.fail()
	}
	other, err := store.Open(ctx, f.dsn, 4)
	must(t, err)
	defer other.Close()
	m := &slowMailer{delay: 150 * time.Millisecond, sent: map[string]int{}}
	var wg sync.WaitGroup
	for _, st := range []*store.Store{f.st, other} {
		w := &worker.Worker{Store: st, Mailer: m, Interval: 10 * time.Millisecond, Lease: 200 * time.Millisecond,
			MailTimeout: time.Second, Rand: func() float64 { return 0 }}
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(ctx) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, d := m.counts(); d < 6 && time.Now().Before(deadline); _, d = m.counts() {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // room for a second replica's duplicate
	cancel()
	wg.Wait()
	if mails, distinct := m.counts(); mails != 6 || distinct != 6 {
		t.Errorf("%d mails for %d events, want each once: %v", mails, distinct, m.sent)
	}
	for _, d := range f.deliveriesOf(t, "email") {
		if d.State != "delivered" || d.Attempts != 1 {
			t.Errorf("delivery %d: %s after %d attempts", d.ID, d.State, d.Attempts)
		}
	}
}

// deliveriesOf lists every delivery of a channel.
func (f *fixture) deliveriesOf(t *testing.T, channel string) []store.DeliveryView {
	t.Helper()
	var out []store.DeliveryView
	tgs, err := f.st.ListTargets(context.Background(), f.tenant)
	must(t, err)
	for _, tg := range tgs {
		if tg.Kind == channel {
			out = append(out, f.deliveries(tg.ID)...)
		}
	}
	return out
}
