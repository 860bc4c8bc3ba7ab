package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/notify/worker"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

type fixture struct {
	t      *testing.T
	st     *store.Store
	dsn    string // for a second store handle (another replica)
	node   store.Node
	tenant string
	job    store.CronJob
	slot   time.Time
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	db := pgtest.NewDB(t)
	st := db.Store
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	must(t, err)
	node, _, err := st.CreateNode(ctx, sh.ID, "node1")
	must(t, err)
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", ShardID: sh.ID, LinuxUser: "acme", LinuxGroup: "acme"})
	must(t, err)
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/acme/public")
	must(t, err)
	j, _, err := st.CreateJob(ctx, tn.ID, store.JobFields{Name: "backup", WebrootID: wr.ID, Schedule: "* * * * *", Timezone: "UTC",
		Command: "false", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 3}, nil)
	must(t, err)
	return &fixture{t: t, st: st, dsn: db.DSN, node: node, tenant: tn.ID, job: j, slot: time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)}
}

// fail records one more failure of the job.
func (f *fixture) fail() {
	f.t.Helper()
	f.slot = f.slot.Add(time.Minute)
	_, err := f.st.RecordOutcome(context.Background(), f.node, f.job.ID, store.Outcome{
		RunKey: runkey.Scheduled(f.job.ID, f.slot), Version: f.job.Version, ScheduledAt: f.slot, Result: wire.ResultExitCode})
	must(f.t, err)
}

func (f *fixture) webhook(url string) store.NotificationTarget {
	f.t.Helper()
	tg, err := f.st.CreateTarget(context.Background(), store.NotificationTarget{TenantID: f.tenant, Kind: "webhook",
		URL: url, Secret: "topsecret", Events: []string{"run_failed"}})
	must(f.t, err)
	return tg
}

func (f *fixture) deliveries(tg string) []store.DeliveryView {
	f.t.Helper()
	ds, err := f.st.ListDeliveries(context.Background(), tg, 0, 100)
	must(f.t, err)
	return ds
}

// age makes every event older by d (created_at moves back).
func (f *fixture) age(d time.Duration) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE notification_events SET created_at = created_at - $1::interval`, d)
	must(f.t, err)
}

// due makes every delivery due now (instead of waiting out a backoff).
func (f *fixture) due() {
	_, err := f.st.Pool().Exec(context.Background(), `UPDATE notification_deliveries SET next_attempt_at = now()`)
	must(f.t, err)
}

func newWorker(f *fixture, allowPrivate bool) *worker.Worker {
	return &worker.Worker{Store: f.st, Webhook: worker.NewWebhook(allowPrivate), Rand: func() float64 { return 0 }}
}

// receiver answers with the statuses in order (then 200) and keeps what
// it got.
type receiver struct {
	mu       sync.Mutex
	statuses []int
	got      []*http.Request
	bodies   [][]byte
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got, r.bodies = append(r.got, req), append(r.bodies, b)
	status := 200
	if len(r.statuses) > 0 {
		status, r.statuses = r.statuses[0], r.statuses[1:]
	}
	if status >= 300 && status < 400 {
		w.Header().Set("Location", "/elsewhere")
	}
	w.WriteHeader(status)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func TestWebhookSignedAndDeliveredOnce(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	tg := f.webhook(srv.URL + "/hook")
	f.fail()
	w := newWorker(f, true)
	w.Pass(context.Background())
	w.Pass(context.Background())
	if rcv.count() != 1 {
		t.Fatalf("receiver got %d requests, want 1", rcv.count())
	}
	req, body := rcv.got[0], rcv.bodies[0]
	if err := notify.Verify([]byte("topsecret"), body, req.Header.Get(notify.SignatureHeader), time.Now()); err != nil {
		t.Errorf("signature: %v", err)
	}
	var b worker.Body
	must(t, json.Unmarshal(body, &b))
	if b.Kind != "run_failed" || b.CronJobID != f.job.ID || req.Header.Get(worker.EventIDHeader) == "" ||
		req.Header.Get(worker.IdempotencyKey) != "hostcron-event-"+req.Header.Get(worker.EventIDHeader) ||
		!strings.Contains(string(b.Data), `"job_name":"backup"`) {
		t.Errorf("body %s, headers %v", body, req.Header)
	}
	if ds := f.deliveries(tg.ID); len(ds) != 1 || ds[0].State != "delivered" || ds[0].Attempts != 1 || *ds[0].LastStatus != 200 {
		t.Errorf("deliveries %+v", ds)
	}
}

func TestWebhookRetriesWithBackoffThenDelivers(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{statuses: []int{500}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	tg := f.webhook(srv.URL)
	f.fail()
	w := newWorker(f, true)
	w.Pass(context.Background())
	ds := f.deliveries(tg.ID)
	if len(ds) != 1 || ds[0].State != "pending" || ds[0].Attempts != 1 || ds[0].NextAttemptAt == nil ||
		time.Until(*ds[0].NextAttemptAt) < notify.Backoff(1, 0)-time.Second || !strings.Contains(ds[0].LastError, "500") {
		t.Fatalf("after a 500: %+v", ds)
	}
	w.Pass(context.Background()) // not due yet
	if rcv.count() != 1 {
		t.Fatalf("retried before the backoff: %d requests", rcv.count())
	}
	f.due()
	w.Pass(context.Background())
	if ds := f.deliveries(tg.ID); ds[0].State != "delivered" || ds[0].Attempts != 2 || rcv.got[1].Header.Get(worker.AttemptHeader) != "2" {
		t.Errorf("after the retry: %+v", ds)
	}
}

func TestWebhookPermanentAndRedirect(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{statuses: []int{410, 302}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	tg := f.webhook(srv.URL + "/hook")
	f.fail()
	w := newWorker(f, true)
	w.Pass(context.Background())
	if ds := f.deliveries(tg.ID); ds[0].State != "failed" || ds[0].Attempts != 1 {
		t.Errorf("410: %+v", ds)
	}
	f.fail()
	w.Pass(context.Background())
	ds := f.deliveries(tg.ID)
	if ds[0].State != "pending" || ds[0].Attempts != 1 || !strings.Contains(ds[0].LastError, "redirect refused") {
		t.Errorf("302: %+v", ds[0])
	}
	for _, r := range rcv.got {
		if r.URL.Path == "/elsewhere" {
			t.Error("the redirect was followed")
		}
	}
}

func TestWebhookRefusesPrivateAddresses(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{}
	srv := httptest.NewServer(rcv) // on 127.0.0.1
	defer srv.Close()
	tg := f.webhook(srv.URL)
	f.fail()
	newWorker(f, false).Pass(context.Background())
	if rcv.count() != 0 {
		t.Fatal("a webhook reached 127.0.0.1 without the operator's allowance")
	}
	if ds := f.deliveries(tg.ID); ds[0].State != "pending" || !strings.Contains(ds[0].LastError, worker.ErrNoPublicAddress.Error()) ||
		strings.Contains(ds[0].LastError, "127.0.0.1") {
		t.Errorf("refused: %+v (want the refusal, never the dialed address, which maps internal names)", ds[0])
	}
	// Also by name: localhost resolves to loopback, and the check is on
	// the resolved address.
	res := worker.NewWebhook(false).Post(context.Background(), store.Delivery{URL: strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)})
	if !errors.Is(res.Err, worker.ErrNoPublicAddress) {
		t.Errorf("localhost: %v", res.Err)
	}
	// A name that does not resolve reads the same: otherwise a tenant's
	// guesses at internal names (postgres.svc.cluster.local, ...) would
	// tell those the platform's resolver knows from those it does not.
	missing := worker.NewWebhook(false).Post(context.Background(), store.Delivery{URL: "https://no-such-name.invalid/"})
	if !errors.Is(missing.Err, worker.ErrNoPublicAddress) || missing.Err.Error() != res.Err.Error() {
		t.Errorf("a name that does not resolve: %v; one that resolves to loopback: %v (want the same words)", missing.Err, res.Err)
	}
}

// fakeMailer records messages; err is returned for every send.
type fakeMailer struct {
	mu   sync.Mutex
	sent []mail.Message
	err  error
}

func (m *fakeMailer) Send(_ context.Context, msg mail.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, msg)
	return m.err
}

func TestMailRateLimitAndDigest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tg, err := f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: f.tenant, Kind: "email", Address: "ops@acme.example",
		Events: []string{"run_failed"}})
	must(t, err)
	m := &fakeMailer{}
	w := &worker.Worker{Store: f.st, Mailer: m, MailLimit: 2, Rand: func() float64 { return 0 }}
	for i := 0; i < 4; i++ {
		f.fail()
	}
	w.Pass(ctx)
	if len(m.sent) != 2 {
		t.Fatalf("sent %d, want the limit of 2", len(m.sent))
	}
	held := 0
	for _, d := range f.deliveries(tg.ID) {
		if d.State == "held" {
			held++
		}
	}
	if held != 2 {
		t.Fatalf("%d held, want 2", held)
	}
	// The window ends: the held ones go out as one digest.
	_, err = f.st.Pool().Exec(ctx, `UPDATE notification_mail_windows SET start = now() - interval '2 hours'`)
	must(t, err)
	f.due()
	w.Pass(ctx)
	if len(m.sent) != 3 || !strings.Contains(m.sent[2].Subject, "2 notifications") {
		t.Fatalf("digest: %+v", m.sent)
	}
	for _, d := range f.deliveries(tg.ID) {
		if d.State != "delivered" {
			t.Errorf("delivery %d is %s", d.ID, d.State)
		}
	}
	// A relay's permanent refusal fails the delivery.
	m.err = &mail.PermanentError{Err: errors.New("550 no such user")}
	f.fail()
	w.Pass(ctx)
	if ds := f.deliveries(tg.ID); ds[0].State != "failed" || !strings.Contains(ds[0].LastError, "550") {
		t.Errorf("permanent: %+v", ds[0])
	}
}

// Two workers (two replicas) on one outbox deliver each event once, and
// Run ends when its context does.
func TestTwoWorkersDeliverOnce(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	f.webhook(srv.URL)
	for i := 0; i < 10; i++ {
		f.fail()
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		w := newWorker(f, true)
		w.Interval, w.Batch = 10*time.Millisecond, 3
		wg.Add(1)
		go func() { defer wg.Done(); w.Run(ctx) }()
	}
	deadline := time.Now().Add(10 * time.Second)
	for rcv.count() < 10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	seen := map[string]int{}
	for _, r := range rcv.got {
		seen[r.Header.Get(worker.EventIDHeader)]++
	}
	if len(seen) != 10 || len(rcv.got) != 10 {
		t.Errorf("%d requests for %d events, want 10 each once: %v", len(rcv.got), len(seen), seen)
	}
}

type fakeTail string

func (f fakeTail) OutputTail(context.Context, store.Delivery) (string, error) { return string(f), nil }

// A disable_warning carries the run's output tail; other kinds do not.
func TestDisableWarningCarriesTheOutputTail(t *testing.T) {
	f := newFixture(t)
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	_, err := f.st.CreateTarget(context.Background(), store.NotificationTarget{TenantID: f.tenant, Kind: "webhook",
		URL: srv.URL, Secret: "topsecret", Events: []string{"run_failed", "disable_warning"}})
	must(t, err)
	f.fail()
	f.fail()
	f.age(time.Minute) // the output has had time to reach the log store
	w := newWorker(f, true)
	w.Tail = fakeTail("Fatal error: out of coffee")
	w.Pass(context.Background())
	tails := map[string]string{}
	for _, b := range rcv.bodies {
		var body struct {
			Kind string `json:"kind"`
			Data struct {
				OutputTail string `json:"output_tail"`
			} `json:"data"`
		}
		must(t, json.Unmarshal(b, &body))
		tails[body.Kind] += body.Data.OutputTail
	}
	if len(rcv.bodies) != 3 || tails["disable_warning"] != "Fatal error: out of coffee" || tails["run_failed"] != "" {
		t.Errorf("%d bodies, tails %q", len(rcv.bodies), tails)
	}
}
