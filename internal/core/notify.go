package core

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/notify/worker"
	"github.com/hostcron/hostcron/internal/store"
)

// NotifyConfig configures tenant notifications. The worker runs on every
// replica (claims are leased, so replicas share the outbox).
type NotifyConfig struct {
	// AllowPrivateTargets lets webhooks reach loopback, link-local and
	// private addresses, and plain http: for tests and private installs
	// only, or a tenant can make the core call its own internals.
	AllowPrivateTargets bool
	SMTP                SMTPConfig
	// MailLimit is e-mails per tenant per hour (default 20); beyond it
	// they are held and sent as a digest per address.
	MailLimit int
	// Mailer overrides the relay built from SMTP (tests); nil: SMTP's.
	Mailer worker.Mailer
	// Interval is the worker's poll interval (default 1s).
	Interval time.Duration
}

// SMTPConfig is the operator's relay.
type SMTPConfig struct {
	Addr, From, Username, Password string // empty Addr: no e-mail
	StartTLS                       bool
}

// newMailer builds the relay e-mail goes through (nil: no relay is
// configured, and e-mail deliveries wait).
func newMailer(c SMTPConfig) worker.Mailer {
	if c.Addr == "" {
		return nil
	}
	return mail.Relay{Addr: c.Addr, From: c.From, Username: c.Username, Password: c.Password, StartTLS: c.StartTLS, Timeout: mail.DefaultTimeout}
}

// startNotify starts the notification worker until bg ends, and counts
// into reg.
func (c *Core) startNotify(bg context.Context, cfg NotifyConfig, logs *logship.Client, reg prometheus.Registerer) {
	reg.MustRegister(&metrics.NotifyCollector{Source: c.store, Log: c.log})
	mailer := cfg.Mailer
	if mailer == nil {
		mailer = newMailer(cfg.SMTP)
	}
	w := &worker.Worker{Store: c.store, Log: c.log, Webhook: worker.NewWebhook(cfg.AllowPrivateTargets),
		Mailer: mailer, MailLimit: cfg.MailLimit, Interval: cfg.Interval, Metrics: metrics.NewNotify(reg)}
	if logs != nil {
		w.Tail = lokiTail{logs: logs, store: c.store}
	}
	c.goLoop(func() { w.Run(bg) })
}

var _ worker.Store = (*store.Store)(nil)
