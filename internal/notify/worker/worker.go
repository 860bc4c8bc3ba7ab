// Package worker delivers tenant notifications from the outbox the store
// writes with each run (store.ClaimWebhookDeliveries, PlanTenantMail):
// claim due deliveries in a short transaction with a lease, attempt them
// outside any transaction, record each attempt (delivered, retried after
// notify.Backoff, or failed). Delivery is at least once: a worker that
// dies mid-attempt leaves the lease to run out and another (on any
// replica) attempts again, so receivers dedupe by the event id. Each
// claim carries a lease token and only its holder may record, so a
// worker that outlived its lease cannot overwrite the next one's result.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/store"
)

// Store is what the worker needs of the store.
type Store interface {
	ClaimWebhookDeliveries(ctx context.Context, c store.WebhookClaim) ([]store.Delivery, error)
	RecordAttempt(ctx context.Context, id, lease int64, a store.Attempt) (store.Recorded, error)
	DeferDelivery(ctx context.Context, id, lease int64, in time.Duration) (bool, error)
	PauseTarget(ctx context.Context, targetID string, pause time.Duration) error
	DueMailTenants(ctx context.Context, limit int) ([]string, error)
	PlanTenantMail(ctx context.Context, tenantID string, c store.MailClaim, plan store.MailPlanner) (store.MailBatch, error)
	RefundMail(ctx context.Context, tenantID string, windowStart time.Time) error
}

// Mailer sends one e-mail through the operator's relay (mail.Relay when
// merged); an error wrapping *mail.PermanentError is not retried.
type Mailer interface {
	Send(ctx context.Context, m mail.Message) error
}

// Tailer reads the end of a run's output for a disable_warning (the core
// asks the log store); "" when there is none.
type Tailer interface {
	OutputTail(ctx context.Context, d store.Delivery) (string, error)
}

// Worker polls the notification outbox until its context ends.
type Worker struct {
	Store Store
	Log   *slog.Logger
	// Webhook posts the webhooks (NewWebhook; nil: one with the
	// defaults, refusing private addresses).
	Webhook *Webhook
	// Mailer sends e-mail; nil: e-mail deliveries wait.
	Mailer Mailer
	// MailLimit is e-mails per tenant per MailPeriod (default 20 per
	// hour); beyond it they are held and sent as one digest per address.
	MailLimit  int
	MailPeriod time.Duration
	// MailTimeout bounds one send (default mail.DefaultTimeout, the
	// relay's own); a plan's deliveries are leased for as many of them as
	// it has mails (MailLease), so a slow relay cannot outlive the lease.
	MailTimeout time.Duration
	// DigestMax bounds the held deliveries one digest covers (default
	// 1000); beyond it the digest says "and N more".
	DigestMax int
	Interval  time.Duration // poll interval (default 1s)
	Batch     int           // fresh e-mail deliveries claimed per tenant per pass (default 20)
	// Concurrency is the webhook sends in flight at once (default 20);
	// the worker claims only as many as it has free slots.
	Concurrency int
	// PerTarget and PerTenant cap the webhook deliveries one target and
	// one tenant have in flight across workers (default 4 and 10), so a
	// receiver that hangs holds a few slots, not the pool.
	PerTarget, PerTenant int
	// BreakerAfter consecutive failed attempts of a webhook target open
	// its circuit: its other pending deliveries wait (default 5).
	BreakerAfter int
	// Lease keeps other workers off a claimed webhook delivery (default
	// 60s: well above an attempt's time limit).
	Lease   time.Duration
	Metrics *metrics.Notify
	Rand    func() float64 // jitter source (default math/rand/v2)
	// Tail adds the run's output tail to disable_warning events (nil:
	// none). Best effort: a log store that does not answer leaves it out.
	// With it, a disable_warning waits for its output (TailWait).
	Tail Tailer

	once  sync.Once
	slots chan struct{} // a webhook send holds one
}

func (w *Worker) defaults() {
	w.once.Do(w.setDefaults)
}

func (w *Worker) setDefaults() {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.Webhook == nil {
		w.Webhook = NewWebhook(false)
	}
	if w.MailLimit <= 0 {
		w.MailLimit = 20
	}
	if w.MailPeriod <= 0 {
		w.MailPeriod = time.Hour
	}
	if w.MailTimeout <= 0 {
		w.MailTimeout = mail.DefaultTimeout
	}
	if w.DigestMax <= 0 {
		w.DigestMax = 1000
	}
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	if w.Batch <= 0 {
		w.Batch = 20
	}
	if w.Concurrency <= 0 {
		w.Concurrency = 20
	}
	if w.PerTarget <= 0 {
		w.PerTarget = 4
	}
	if w.PerTenant <= 0 {
		w.PerTenant = 10
	}
	if w.BreakerAfter <= 0 {
		w.BreakerAfter = 5
	}
	if w.Lease <= 0 {
		w.Lease = time.Minute
	}
	if w.Rand == nil {
		w.Rand = rand.Float64
	}
	w.slots = make(chan struct{}, w.Concurrency)
}

// Run delivers until ctx ends; attempts in flight then end, unrecorded
// (their leases run out and they are attempted again). Webhooks are
// claimed whenever send slots are free, without waiting for a batch to
// finish; e-mail runs on its own loop, so a slow relay never holds back a
// webhook (nor a slow webhook a mail).
func (w *Worker) Run(ctx context.Context) {
	w.defaults()
	var wg sync.WaitGroup
	defer wg.Wait()
	if w.Mailer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, func() { w.logPassErr(ctx, "mail", w.mailPass(ctx)) })
		}()
	}
	w.loop(ctx, func() { w.logPassErr(ctx, "webhook", w.dispatchWebhooks(ctx, &wg)) })
}

// loop calls pass every Interval until ctx ends.
func (w *Worker) loop(ctx context.Context, pass func()) {
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		pass()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) logPassErr(ctx context.Context, what string, err error) {
	if err != nil && ctx.Err() == nil {
		w.Log.Warn("notifications: "+what+" pass", "err", err)
	}
}

// Pass claims and attempts what is due once, and waits for it: webhooks,
// then e-mail (tests and tools; Run does not wait).
func (w *Worker) Pass(ctx context.Context) {
	w.defaults()
	var wg sync.WaitGroup
	w.logPassErr(ctx, "webhook", w.dispatchWebhooks(ctx, &wg))
	wg.Wait()
	if w.Mailer != nil {
		w.logPassErr(ctx, "mail", w.mailPass(ctx))
	}
}

// dispatchWebhooks claims as many due webhooks as there are free send
// slots and starts each on its own goroutine (counted in wg), which frees
// its slot when done.
func (w *Worker) dispatchWebhooks(ctx context.Context, wg *sync.WaitGroup) error {
	free := cap(w.slots) - len(w.slots)
	if free == 0 {
		return nil
	}
	ds, err := w.Store.ClaimWebhookDeliveries(ctx, store.WebhookClaim{Limit: free, Lease: w.Lease,
		PerTarget: w.PerTarget, PerTenant: w.PerTenant})
	if err != nil {
		return err
	}
	for _, d := range ds {
		w.slots <- struct{}{} // never blocks: only this goroutine takes slots, and free were free
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-w.slots }()
			defer w.survivePanic(ctx, d)
			w.deliverWebhook(ctx, d)
		}()
	}
	return nil
}

// survivePanic stops a panic in one delivery from ending the core: the
// delivery fails for good (the tenant reads only that it failed
// internally), since its lease running out would hand the same row to the
// next replica, to panic there in turn.
func (w *Worker) survivePanic(ctx context.Context, d store.Delivery) {
	r := recover()
	if r == nil {
		return
	}
	w.Log.Error("notifications: a delivery panicked", "delivery", d.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	w.record(ctx, d, "webhook", notify.Permanent, nil, errors.New("internal error while delivering"), "panic", notify.StatePending)
}

// deliverWebhook attempts one claimed webhook (or defers a
// disable_warning whose output is not in the log store yet).
func (w *Worker) deliverWebhook(ctx context.Context, d store.Delivery) {
	tail, wait := w.tailOrWait(ctx, d)
	if wait > 0 {
		w.deferDelivery(ctx, d, wait)
		return
	}
	d.Payload = withTail(d.Payload, tail)
	res := w.Webhook.Post(ctx, d)
	w.record(ctx, d, "webhook", res.Verdict, res.Status, res.Err, res.Reason, notify.StatePending)
}

// record stores an attempt's result: delivered, retried (in retryState:
// pending, or held for a digest) or failed after notify.Next. It is
// dropped when the claim lost its lease (another worker has the delivery
// now). A failed webhook attempt may open its target's circuit.
func (w *Worker) record(ctx context.Context, d store.Delivery, channel string, v notify.Verdict, status *int, err error, reason, retryState string) {
	if ctx.Err() != nil {
		return // shutting down: the lease runs out, the next worker tries again
	}
	a := store.Attempt{Status: status}
	result := notify.StateDelivered
	if v == notify.Delivered {
		a.State = notify.StateDelivered
	} else {
		a.State, a.RetryIn = notify.Next(v, d.Attempts+1, w.Rand())
		if a.State == notify.StatePending {
			a.State, result = retryState, "retry"
		} else {
			result = notify.StateFailed
		}
		if err != nil {
			a.Error = err.Error()
		}
		w.Log.Info("notification attempt failed", "delivery", d.ID, "event", d.EventID, "channel", channel,
			"attempt", d.Attempts+1, "next", a.State, "retry_in", a.RetryIn, "err", err)
	}
	w.Metrics.Attempted(channel, d.Kind, result, reason)
	rec, rerr := w.Store.RecordAttempt(ctx, d.ID, d.Lease, a)
	switch {
	case rerr != nil:
		w.Log.Warn("notifications: attempt not recorded (it will be tried again)", "delivery", d.ID, "err", rerr)
		return
	case !rec.Applied:
		w.Log.Warn("notifications: attempt not recorded: the lease was lost", "delivery", d.ID, "lease", d.Lease)
		return
	}
	if channel != "webhook" || v == notify.Delivered {
		return
	}
	if pause, open := BreakerPause(rec.TargetFailures, w.BreakerAfter, w.Rand()); open {
		w.Log.Info("notifications: target failing, its deliveries wait", "target", d.TargetID,
			"failures", rec.TargetFailures, "pause", pause)
		if perr := w.Store.PauseTarget(ctx, d.TargetID, pause); perr != nil {
			w.Log.Warn("notifications: pause target", "target", d.TargetID, "err", perr)
		}
	}
}

// deferDelivery gives a claimed delivery back, due again in wait.
func (w *Worker) deferDelivery(ctx context.Context, d store.Delivery, wait time.Duration) {
	if ctx.Err() != nil {
		return
	}
	if ok, err := w.Store.DeferDelivery(ctx, d.ID, d.Lease, wait); err != nil || !ok {
		w.Log.Warn("notifications: delivery not deferred", "delivery", d.ID, "err", err)
	}
}

// mailPass plans and sends the due e-mail of a few tenants, one tenant at
// a time (its rate window is locked while it is planned).
func (w *Worker) mailPass(ctx context.Context) error {
	tenants, err := w.Store.DueMailTenants(ctx, 10)
	if err != nil {
		return err
	}
	planner := func(now time.Time, win mail.Window, due []mail.Due) mail.Plan {
		return mail.PlanTenant(now, win, due, w.MailLimit, w.MailPeriod)
	}
	claim := store.MailClaim{Limit: w.Batch, PerAddress: w.DigestMax, Lease: func(mails int) time.Duration {
		return MailLease(mails, w.MailTimeout+tailTimeout)
	}}
	var errs []error
	for _, tenant := range tenants {
		b, err := w.Store.PlanTenantMail(ctx, tenant, claim, planner)
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
			continue
		}
		w.executeMailPlan(ctx, tenant, b)
	}
	return errors.Join(errs...)
}

// executeMailPlan sends each e-mail of a plan and one digest per address,
// recording every delivery it covers; held ones wait (the store marked
// them). A digest that fails is retried as held, so it is a digest again.
// A mail not sent gives its budget back. When ctx ends mid-plan (SIGTERM),
// a mail the relay took is still recorded, and the rest are handed back
// at once, with their budget: the plan's lease is long (a relay timeout
// per mail), and a rolling deploy must not hold a tenant's mail for it.
func (w *Worker) executeMailPlan(ctx context.Context, tenant string, b store.MailBatch) {
	byID := make(map[int64]store.Delivery, len(b.Claimed))
	for _, d := range b.Claimed {
		byID[d.ID] = d
	}
	for _, due := range b.Plan.Send {
		d := byID[due.DeliveryID]
		if ctx.Err() != nil {
			w.handBack(ctx, tenant, b.Plan.Window, d)
			continue
		}
		tail, wait := w.tailOrWait(ctx, d)
		if wait > 0 {
			w.deferDelivery(ctx, d, wait)
			w.refund(ctx, tenant, b.Plan.Window, true)
			continue
		}
		due.Event.OutputTail = tail
		err := w.send(ctx, mail.Render(due.To, due.Event))
		if err != nil && ctx.Err() != nil {
			w.handBack(ctx, tenant, b.Plan.Window, d)
			continue
		}
		sctx, cancel := settling(ctx)
		v, reason := mailVerdict(err)
		w.record(sctx, d, "email", v, nil, err, reason, notify.StatePending)
		w.refund(sctx, tenant, b.Plan.Window, err != nil)
		cancel()
	}
	for to, dues := range b.Plan.Digests {
		covered := make([]store.Delivery, len(dues))
		for i, due := range dues {
			covered[i] = byID[due.DeliveryID]
		}
		if ctx.Err() != nil {
			w.handBack(ctx, tenant, b.Plan.Window, covered...)
			continue
		}
		err := w.send(ctx, mail.RenderDigestMore(to, digestAccount(tenant), w.digestEvents(ctx, dues, byID), b.More[to]))
		if err != nil && ctx.Err() != nil {
			w.handBack(ctx, tenant, b.Plan.Window, covered...)
			continue
		}
		sctx, cancel := settling(ctx)
		v, reason := mailVerdict(err)
		for _, d := range covered {
			w.record(sctx, d, "email", v, nil, err, reason, notify.StateHeld)
		}
		w.refund(sctx, tenant, b.Plan.Window, err != nil)
		cancel()
	}
}

// digestAccount names whose mail a digest holds: the tenant, or the
// operator for the operator's own rate window.
func digestAccount(tenant string) string {
	if tenant == store.OperatorMailKey {
		return "operator"
	}
	return tenant
}

// settleTimeout bounds the bookkeeping of one mail once it is decided.
const settleTimeout = 5 * time.Second

// settling is ctx for the bookkeeping of a mail already decided: it does
// not end with ctx (bounded by settleTimeout instead), so a mail the relay
// took is recorded even when shutdown begins that instant, and is never
// sent again. If the database does not answer, the lease runs out and the
// mail is retried: at least once, never lost.
func settling(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// handBack returns one unsent mail's deliveries (one, or a digest's) to
// the queue, due now and unattempted, and gives its budget back.
func (w *Worker) handBack(ctx context.Context, tenant string, win mail.Window, ds ...store.Delivery) {
	sctx, cancel := settling(ctx)
	defer cancel()
	for _, d := range ds {
		w.deferDelivery(sctx, d, 0)
	}
	w.refund(sctx, tenant, win, true)
}

// digestEvents are a digest's events, disable_warnings with their output
// tail (read within one tailTimeout for the whole digest: the lease
// allows one per mail).
func (w *Worker) digestEvents(ctx context.Context, dues []mail.Due, byID map[int64]store.Delivery) []mail.Event {
	tctx, cancel := context.WithTimeout(ctx, tailTimeout)
	defer cancel()
	events := make([]mail.Event, len(dues))
	for i, due := range dues {
		events[i] = due.Event
		if tctx.Err() == nil {
			events[i].OutputTail = w.tail(tctx, byID[due.DeliveryID])
		}
	}
	return events
}

// send is one mail, bounded by MailTimeout whatever the Mailer does.
func (w *Worker) send(ctx context.Context, m mail.Message) error {
	sctx, cancel := context.WithTimeout(ctx, w.MailTimeout)
	defer cancel()
	if err := w.Mailer.Send(sctx, m); err != nil {
		return fmt.Errorf("send mail %s: %w", m.ID, err)
	}
	return nil
}

// refund gives back a reserved mail of the tenant's window when do.
func (w *Worker) refund(ctx context.Context, tenant string, win mail.Window, do bool) {
	if !do || ctx.Err() != nil {
		return
	}
	if err := w.Store.RefundMail(ctx, tenant, win.Start); err != nil {
		w.Log.Warn("notifications: mail budget not given back", "tenant", tenant, "err", err)
	}
}

// tailOrWait is the output tail of a disable_warning, or how long to wait
// before attempting it (TailWait): its output may not have reached the
// log store yet. Other kinds, or no Tailer: "", 0.
func (w *Worker) tailOrWait(ctx context.Context, d store.Delivery) (string, time.Duration) {
	if w.Tail == nil || d.Kind != string(notify.DisableWarning) {
		return "", 0
	}
	// The event's age on the database's clock (both times are its), plus
	// what has passed here since this check began: a mail sent late in
	// its plan is taken as younger than it is, so it may wait longer,
	// never too little.
	claimed := time.Now()
	age := func() time.Duration { return d.ClaimedAt.Sub(d.CreatedAt) + time.Since(claimed) }
	if wait := TailWait(age(), false, ""); wait > 0 {
		return "", wait
	}
	tail := w.tail(ctx, d)
	return tail, TailWait(age(), true, tail)
}

// tailTimeout bounds reading one output tail.
const tailTimeout = 3 * time.Second

// tail is the output tail of a disable_warning's run ("" for other kinds,
// without a Tailer, or when the log store does not answer).
func (w *Worker) tail(ctx context.Context, d store.Delivery) string {
	if w.Tail == nil || d.Kind != string(notify.DisableWarning) {
		return ""
	}
	tctx, cancel := context.WithTimeout(ctx, tailTimeout)
	defer cancel()
	t, err := w.Tail.OutputTail(tctx, d)
	if err != nil {
		w.Log.Warn("notifications: no output tail", "event", d.EventID, "err", err)
		return ""
	}
	return t
}

// withTail adds output_tail to an event's payload (unchanged when tail is
// empty or the payload is not an object).
func withTail(payload json.RawMessage, tail string) json.RawMessage {
	if tail == "" {
		return payload
	}
	var m map[string]any
	if err := json.Unmarshal(payload, &m); err != nil {
		return payload
	}
	m["output_tail"] = tail
	b, err := json.Marshal(m)
	if err != nil {
		return payload
	}
	return b
}

// mailVerdict classifies a relay's answer.
func mailVerdict(err error) (notify.Verdict, string) {
	var perm *mail.PermanentError
	switch {
	case err == nil:
		return notify.Delivered, ""
	case errors.As(err, &perm):
		return notify.Permanent, "smtp_permanent"
	}
	return notify.Retry, "smtp"
}
