// Package worker delivers tenant notifications from the outbox the store
// writes with each run (store.ClaimWebhookDeliveries, PlanTenantMail):
// claim due deliveries in a short transaction with a lease, attempt them
// outside any transaction, record each attempt (delivered, retried after
// notify.Backoff, or failed). Delivery is at least once: a worker that
// dies mid-attempt leaves the lease to run out and another (on any
// replica) attempts again, so receivers dedupe by the event id.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/store"
)

// Store is what the worker needs of the store.
type Store interface {
	ClaimWebhookDeliveries(ctx context.Context, limit int, lease time.Duration) ([]store.Delivery, error)
	RecordAttempt(ctx context.Context, id int64, a store.Attempt) error
	DueMailTenants(ctx context.Context, limit int) ([]string, error)
	PlanTenantMail(ctx context.Context, tenantID string, limit int, lease time.Duration, plan store.MailPlanner) (mail.Plan, []store.Delivery, error)
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
	Interval   time.Duration // poll interval (default 1s)
	Batch      int           // deliveries claimed per pass (default 20)
	// Lease keeps other workers off a claimed delivery (default 60s: well
	// above an attempt's time limit).
	Lease   time.Duration
	Metrics *metrics.Notify
	Rand    func() float64 // jitter source (default math/rand/v2)
	// Tail adds the run's output tail to disable_warning events (nil:
	// none). Best effort: a log store that does not answer leaves it out.
	Tail Tailer
}

func (w *Worker) defaults() {
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
	if w.Interval <= 0 {
		w.Interval = time.Second
	}
	if w.Batch <= 0 {
		w.Batch = 20
	}
	if w.Lease <= 0 {
		w.Lease = time.Minute
	}
	if w.Rand == nil {
		w.Rand = rand.Float64
	}
}

// Run delivers until ctx ends; attempts in flight then end, unrecorded
// (their leases run out and they are attempted again).
func (w *Worker) Run(ctx context.Context) {
	w.defaults()
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		w.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass claims and attempts what is due once: webhooks, then e-mail.
func (w *Worker) Pass(ctx context.Context) {
	w.defaults()
	if err := w.webhookPass(ctx); err != nil && ctx.Err() == nil {
		w.Log.Warn("notifications: webhook pass", "err", err)
	}
	if w.Mailer == nil {
		return
	}
	if err := w.mailPass(ctx); err != nil && ctx.Err() == nil {
		w.Log.Warn("notifications: mail pass", "err", err)
	}
}

// webhookPass attempts one batch of due webhooks concurrently: one slow
// receiver must not hold back the others' deliveries.
func (w *Worker) webhookPass(ctx context.Context) error {
	ds, err := w.Store.ClaimWebhookDeliveries(ctx, w.Batch, w.Lease)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.Payload = withTail(d.Payload, w.tail(ctx, d))
			res := w.Webhook.Post(ctx, d)
			w.record(ctx, d, "webhook", res.Verdict, res.Status, res.Err, res.Reason, notify.StatePending)
		}()
	}
	wg.Wait()
	return nil
}

// record stores an attempt's result: delivered, retried (in retryState:
// pending, or held for a digest) or failed after notify.Next.
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
	if rerr := w.Store.RecordAttempt(ctx, d.ID, a); rerr != nil {
		w.Log.Warn("notifications: attempt not recorded (it will be tried again)", "delivery", d.ID, "err", rerr)
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
	var errs []error
	for _, tenant := range tenants {
		plan, claimed, err := w.Store.PlanTenantMail(ctx, tenant, w.Batch, w.Lease, planner)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		w.executeMailPlan(ctx, tenant, plan, claimed)
	}
	return errors.Join(errs...)
}

// executeMailPlan sends each e-mail of a plan and one digest per address,
// recording every delivery it covers; held ones wait (the store marked
// them). A digest that fails is retried as held, so it is a digest again.
func (w *Worker) executeMailPlan(ctx context.Context, tenant string, p mail.Plan, claimed []store.Delivery) {
	byID := make(map[int64]store.Delivery, len(claimed))
	for _, d := range claimed {
		byID[d.ID] = d
	}
	for _, due := range p.Send {
		due.Event.OutputTail = w.tail(ctx, byID[due.DeliveryID])
		err := w.Mailer.Send(ctx, mail.Render(due.To, due.Event))
		v, reason := mailVerdict(err)
		w.record(ctx, byID[due.DeliveryID], "email", v, nil, err, reason, notify.StatePending)
	}
	for to, dues := range p.Digests {
		events := make([]mail.Event, len(dues))
		for i, due := range dues {
			events[i] = due.Event
		}
		err := w.Mailer.Send(ctx, mail.RenderDigest(to, tenant, events))
		v, reason := mailVerdict(err)
		for _, due := range dues {
			w.record(ctx, byID[due.DeliveryID], "email", v, nil, err, reason, notify.StateHeld)
		}
	}
}

// tail is the output tail of a disable_warning's run ("" for other kinds,
// without a Tailer, or when the log store does not answer).
func (w *Worker) tail(ctx context.Context, d store.Delivery) string {
	if w.Tail == nil || d.Kind != string(notify.DisableWarning) {
		return ""
	}
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
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
