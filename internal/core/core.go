// Package core wires the core API process: the store, the HTTP API, and,
// with Temporal, the core's worker, the periodic converge and the outbox
// dispatcher; and the lost-run sweeper. cmd/core-api and the end-to-end
// harness both start the core through it, so the tests run the wiring
// that is deployed.
package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/dispatch"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/quota"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/workflows"
)

// The store is what the workflows' core activities need.
var _ workflows.CoreStore = (*store.Store)(nil)

// Config is what the core runs with; the zero value of an optional part
// leaves that part off.
type Config struct {
	DatabaseURL string
	MaxConns    int32 // database pool size (default 32)
	// UnbatchedOutcomes: one transaction per outcome, not group commits
	// (api.Config; the outcomes benchmark's baseline).
	UnbatchedOutcomes bool
	Listen            string // host:port; port 0 picks one, Addr tells which
	AdminKey          string // bootstrap admin key; empty: none
	// MetricsAddr is where /metrics is served, on a listener of its own,
	// never the tenant API's (host:port; port 0 picks one, MetricsAddr
	// tells which); empty: not served.
	MetricsAddr string
	Log         *slog.Logger

	// TemporalAddress empty: changes wait in the outbox, nodes that
	// announce themselves are answered 503.
	TemporalAddress   string
	TemporalNamespace string // default "default"
	// Trust is the core's TLS client certificate for Temporal and its
	// payload keys (empty: in the clear, logged as a warning).
	Trust       trust.Files
	NodeTimeout time.Duration // provisioning's bound per node (default 2m)
	// ConvergeEvery is how often every shard is converged; 0 creates no
	// schedule (one that exists keeps running).
	ConvergeEvery time.Duration

	LokiURL, LokiOrgID string // empty URL: the logs endpoint answers 503

	// Housekeeping runs the lost-run sweeper and retention; nil: off.
	Housekeeping *housekeeping.Config

	// Quotas are every tenant's limits unless an admin overrides them
	// (nil: store.DefaultQuotas).
	Quotas *quota.Limits

	// Notify configures tenant notifications (webhooks, e-mail).
	Notify NotifyConfig

	// DispatchTestHooks are the outbox dispatcher's fault points, for
	// tests only (tests/flow kills a replica between Temporal accepting a
	// signal and the row being marked); nil in production, and core-api
	// has no flag for them.
	DispatchTestHooks *dispatch.TestHooks
}

// Core is a running core API. Stop ends it.
type Core struct {
	log     *slog.Logger
	store   *store.Store
	http    *http.Server
	addr    string
	metrics *metrics.Server
	cancel  context.CancelFunc // ends the background loops
	loops   sync.WaitGroup
	served  chan error // Serve's end

	stopOnce sync.Once
	stopErr  error
}

// Start brings the core up: it migrates the schema, starts connecting to
// Temporal in the background, and serves HTTP. ctx bounds the start
// only; the core runs until Stop. On error, what was started is stopped.
func Start(ctx context.Context, cfg Config) (*Core, error) {
	cfg = cfg.withDefaults()
	c := &Core{log: cfg.Log, served: make(chan error, 1)}
	bg, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if err := c.start(ctx, bg, cfg); err != nil {
		stopCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = c.Stop(stopCtx)
		return nil, err
	}
	return c, nil
}

func (cfg Config) withDefaults() Config {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 32
	}
	if cfg.TemporalNamespace == "" {
		cfg.TemporalNamespace = "default"
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return cfg
}

// start brings the parts up in dependency order; bg is the background
// loops' context.
func (c *Core) start(ctx, bg context.Context, cfg Config) error {
	var err error
	if c.store, err = store.Open(ctx, cfg.DatabaseURL, cfg.MaxConns); err != nil {
		return err
	}
	if err := c.store.Migrate(ctx); err != nil {
		return err
	}
	if cfg.Quotas != nil {
		c.store.SetQuotaDefaults(*cfg.Quotas)
	}
	// One registry, served on the metrics listener: the API, the
	// dispatcher, the core worker and housekeeping count into it, and the
	// outbox's depth is read from the database at scrape.
	reg := prometheus.NewRegistry()
	m := metrics.NewCore(reg)
	reg.MustRegister(&metrics.OutboxCollector{Source: c.store, Log: cfg.Log})
	apiCfg := api.Config{AdminKey: cfg.AdminKey, Logger: cfg.Log, Metrics: m, AllowPrivateTargets: cfg.Notify.AllowPrivateTargets,
		MailRelay: cfg.Notify.SMTP.Addr != "" || cfg.Notify.Mailer != nil, UnbatchedOutcomes: cfg.UnbatchedOutcomes}
	// Desired-set pages are signed with the key payloads are, so a node
	// trusts what it reads over HTTP exactly as what Temporal delivers.
	if apiCfg.PageKey, err = cfg.Trust.CorePageKey(); err != nil {
		return fmt.Errorf("desired-set page signing: %w", err)
	}
	var logs *logship.Client
	if cfg.LokiURL != "" {
		logs = &logship.Client{URL: cfg.LokiURL, OrgID: cfg.LokiOrgID}
		apiCfg.Logs = logs
	}
	c.startNotify(bg, cfg.Notify, logs, reg)
	if cfg.TemporalAddress != "" {
		link := c.startTemporal(bg, cfg, m)
		apiCfg.Converger, apiCfg.Temporal = link, link
	}
	c.goLoop(func() { c.initShardMetrics(bg, m, time.Minute) })

	if cfg.Housekeeping != nil {
		apiCfg.OutcomeGrace = cfg.Housekeeping.Grace // the slots listing's pending is the sweeper's grace
		hk := *cfg.Housekeeping
		hk.Registry, hk.Metrics = reg, m
		if hk.ConvergeThreshold == 0 {
			hk.ConvergeThreshold = housekeeping.ConvergeThresholdFor(cfg.ConvergeEvery)
		}
		c.goLoop(func() { housekeeping.Run(bg, c.store, hk, c.log) })
	}
	if cfg.MetricsAddr != "" {
		if c.metrics, err = metrics.Listen(cfg.MetricsAddr, reg, cfg.Log); err != nil {
			return err
		}
	}
	return c.serve(cfg.Listen, apiCfg)
}

// initShardMetrics starts the per-shard run counters of every shard at 0
// now and every interval (shards created meanwhile, on any replica), so
// their first lost or platform_error run is an increase, until bg ends.
func (c *Core) initShardMetrics(bg context.Context, m *metrics.Core, every time.Duration) {
	for {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		ids, err := c.store.ShardIDs(ctx)
		cancel()
		if err != nil && bg.Err() == nil {
			c.log.Warn("shard metrics not initialised", "err", err)
		}
		m.InitShards(ids)
		select {
		case <-bg.Done():
			return
		case <-time.After(every):
		}
	}
}

// startTemporal connects to Temporal in the background (dispatch.Link):
// the core serves while Temporal is down, changes wait in the outbox, and
// the worker, the periodic converge and the dispatcher start once it
// answers. The link stops them when bg ends.
func (c *Core) startTemporal(bg context.Context, cfg Config, m *metrics.Core) *dispatch.Link {
	var secure func(*client.Options) error
	if cfg.Trust.Enabled() {
		secure = cfg.Trust.ApplyCore
	} else {
		c.log.Warn("Temporal without TLS and payload signing: only for development")
	}
	link := &dispatch.Link{Addr: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace, Secure: secure,
		Store: c.store, Log: c.log, NodeTimeout: cfg.NodeTimeout, ConvergeEvery: cfg.ConvergeEvery,
		Hooks: cfg.DispatchTestHooks, Metrics: m}
	c.goLoop(func() { link.Run(bg) })
	return link
}

// serve listens before it returns, so a taken address fails Start and a
// port 0 is known to the caller.
func (c *Core) serve(listen string, apiCfg api.Config) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	c.addr = ln.Addr().String()
	e := api.New(c.store, apiCfg)
	c.http = api.HTTPServer("", e) // timeouts and a body limit
	go func() { c.served <- c.http.Serve(ln) }()
	c.log.Info("core-api listening", "addr", c.addr)
	return nil
}

func (c *Core) goLoop(f func()) {
	c.loops.Add(1)
	go func() { defer c.loops.Done(); f() }()
}

// Addr is the address the API listens on.
func (c *Core) Addr() string { return c.addr }

// MetricsAddr is the address /metrics is served on ("" when not served).
func (c *Core) MetricsAddr() string {
	if c.metrics == nil {
		return ""
	}
	return c.metrics.Addr()
}

// Failed delivers the error that ended the HTTP server on its own (not
// through Stop); the process should then stop.
func (c *Core) Failed() <-chan error { return c.served }

// Stop ends the core in reverse order of its start: no new requests (those
// in flight finish while ctx lasts), then the loops (the Temporal link's
// end stops the worker, whose running activities finish, and closes the
// client), the database. It is safe on a
// partly started core, and a second call returns the first one's result.
func (c *Core) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *Core) stop(ctx context.Context) error {
	var errs []error
	if c.http != nil {
		if err := c.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shut down HTTP: %w", err))
		}
	}
	if c.metrics != nil {
		if err := c.metrics.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	c.cancel()
	c.loops.Wait()
	if c.store != nil {
		c.store.Close()
	}
	return errors.Join(errs...)
}

// Run starts the core and runs it until ctx ends (SIGTERM in the command)
// or the HTTP server fails, then stops it within shutdownTimeout.
func Run(ctx context.Context, cfg Config, shutdownTimeout time.Duration) error {
	c, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	var served error
	select {
	case <-ctx.Done():
	case served = <-c.Failed():
		served = fmt.Errorf("serve: %w", served)
	}
	c.log.Info("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return errors.Join(served, c.Stop(stopCtx))
}
