// Package api is the core API's HTTP interface: tenants' cron jobs, admin
// registration, and the internal endpoint nodes report outcomes to.
package api

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Config configures the server.
type Config struct {
	AdminKey string // bootstrap admin X-API-Key; empty disables it
	Logger   *slog.Logger
	// Metrics are counted here; core serves them on a listener of its
	// own (nil: a new set, registered on Registry if that is set).
	Metrics  *metrics.Core
	Registry prometheus.Registerer
	Now      func() time.Time // nil: time.Now
	// Logs answers the tenant logs endpoint; nil answers 503.
	Logs LogQuerier
	// Converger starts a node's converge when it announces itself; nil
	// answers announcements with 503 (no workflow engine configured).
	Converger Converger
	// Temporal is asked by /healthz; nil: not configured, not checked.
	Temporal HealthChecker
	// OutboxMaxAge: /healthz is degraded when the oldest undispatched
	// change is older (default 2m).
	OutboxMaxAge time.Duration
	// RequestTimeout bounds every request (default 30s).
	RequestTimeout time.Duration
	// AllowPrivateTargets accepts webhook URLs with http and with
	// private, loopback or link-local literal addresses (the operator's
	// --notify-allow-private-targets).
	AllowPrivateTargets bool
	// MailRelay says the core has an SMTP relay: without one, e-mail
	// targets are refused, as their deliveries could only pile up.
	MailRelay bool
	// OutcomeGrace is how long after a run's timeout its outcome may
	// still arrive (the sweeper's grace, default 2m): the slots listing
	// calls a slot younger than timeout + grace pending.
	OutcomeGrace time.Duration
	// PageKey signs every desired-set page (trust.SignPage), the core's
	// payload signing key: nodes with trust keys refuse unsigned pages as
	// they refuse unsigned payloads. nil: pages go unsigned (no trust
	// material, development).
	PageKey ed25519.PrivateKey
	// UnbatchedOutcomes records each outcome in a transaction of its own
	// (store.RecordOutcome) instead of in group commits with the outcomes
	// arriving meanwhile (store.OutcomeBatcher): the benchmark's baseline.
	UnbatchedOutcomes bool
}

// outcomeRecorder records a node's outcome: store.Store alone, or
// store.OutcomeBatcher in group commits; either answers after its commit.
type outcomeRecorder interface {
	RecordOutcome(ctx context.Context, node store.Node, jobID string, o store.Outcome) (store.OutcomeResult, error)
}

// Converger starts converging a node to its shard's desired state.
type Converger interface {
	ConvergeNode(ctx context.Context, nodeID string) error
}

// Server holds the handlers' dependencies.
type Server struct {
	cfg   Config
	store *store.Store
	// outcomes records the nodes' outcomes (Config.UnbatchedOutcomes).
	outcomes outcomeRecorder
	log      *slog.Logger
	metrics  *metrics.Core
	reqs     *requestMetrics
	now      func() time.Time
}

// New builds the HTTP handler.
func New(st *store.Store, cfg Config) *echo.Echo {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewCore(cfg.Registry)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OutboxMaxAge <= 0 {
		cfg.OutboxMaxAge = 2 * time.Minute
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.OutcomeGrace <= 0 {
		cfg.OutcomeGrace = 2 * time.Minute
	}
	s := &Server{cfg: cfg, store: st, log: cfg.Logger, metrics: cfg.Metrics,
		reqs: &requestMetrics{m: cfg.Metrics}, now: cfg.Now, outcomes: st.NewOutcomeBatcher(store.BatchConfig{})}
	if cfg.UnbatchedOutcomes {
		s.outcomes = st
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(s.log)
	e.Use(s.reqs.middleware, requestDeadline(cfg.RequestTimeout))
	e.GET("/healthz", s.healthz)
	e.GET("/api/v1/openapi.yaml", func(c echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", OpenAPI) })

	v1 := e.Group("/api/v1", s.requireKey)
	v1.GET("/cron-preview", s.preview)
	v1.POST("/tenants/:tenant/cron-jobs", s.createJob)
	v1.GET("/tenants/:tenant/cron-jobs", s.listJobs)
	v1.GET("/tenants/:tenant/logs", s.tenantLogs)
	v1.GET("/cron-jobs/:id", s.getJob)
	v1.PUT("/cron-jobs/:id", s.updateJob)
	v1.DELETE("/cron-jobs/:id", s.jobAction(st.DeleteJob))
	v1.POST("/cron-jobs/:id/enable", s.jobAction(st.EnableJob))
	v1.POST("/cron-jobs/:id/disable", s.disableJob)
	v1.POST("/cron-jobs/:id/retry", s.jobAction(st.RetryJob))
	v1.POST("/cron-jobs/:id/run-now", s.runNow)
	v1.GET("/cron-jobs/:id/runs", s.listRuns)
	v1.GET("/cron-jobs/:id/runs/:run", s.getRun)
	v1.POST("/cron-jobs/:id/runs/:run/cancel", s.cancelRun)
	v1.GET("/cron-jobs/:id/events", s.listJobEvents)
	v1.GET("/cron-jobs/:id/slots", s.listSlots)
	v1.GET("/cron-jobs/:id/preview", s.jobPreview)
	v1.POST("/tenants/:tenant/notification-targets", s.createTarget)
	v1.GET("/tenants/:tenant/notification-targets", s.listTargets)
	v1.DELETE("/notification-targets/:id", s.deleteTarget(s.targetInScope))
	v1.GET("/notification-targets/:id/deliveries", s.listDeliveries(s.targetInScope))

	admin := v1.Group("/admin", requireAdmin)
	admin.POST("/shards", s.createShard)
	admin.POST("/shards/:shard/nodes", s.createNode)
	admin.GET("/shards/:shard/nodes", s.listNodes)
	admin.POST("/nodes/:node/drain", s.drainNode)
	admin.DELETE("/nodes/:node", s.deleteNode)
	admin.POST("/tenants", s.createTenant)
	admin.POST("/tenants/:tenant/webroots", s.createWebroot)
	admin.GET("/tenants/:tenant/quotas", s.getQuotas)
	admin.PUT("/tenants/:tenant/quotas", s.setQuotas)
	admin.POST("/api-keys", s.createAPIKey)
	admin.GET("/api-keys", s.listAPIKeys)
	admin.POST("/api-keys/:key/revoke", s.revokeAPIKey)
	admin.POST("/api-keys/:key/rotate", s.rotateAPIKey)
	admin.POST("/nodes/:node/credential/rotate", s.rotateNodeCredential)
	admin.POST("/nodes/:node/credential/revoke", s.revokeNodeCredential)
	admin.POST("/notification-targets", s.createOperatorTarget)
	admin.GET("/notification-targets", s.listOperatorTargets)
	admin.DELETE("/notification-targets/:id", s.deleteTarget(s.operatorTarget))
	admin.GET("/notification-targets/:id/deliveries", s.listDeliveries(s.operatorTarget))

	internal := e.Group("/internal/v1", s.requireNode)
	internal.POST("/cron-jobs/:id/outcome", s.outcome)
	internal.POST("/cron-jobs/:id/started", s.started)
	internal.POST("/nodes/announce", s.announce)
	internal.GET("/nodes/:node/desired-jobs", s.desiredJobs)
	internal.GET("/nodes/:node/desired-digest", s.desiredDigest)
	s.reqs.setRoutes(e.Routes())
	return e
}

// MaxBodyBytes bounds every request body; the largest legitimate one (a
// job with a 4 KiB command) is far below it.
const MaxBodyBytes = 1 << 20

// HTTPServer wraps the handler in a server whose every phase has a time
// limit, so slow or stalled clients cannot pin connections. The write
// limit leaves room for a logs query, which is itself bounded.
func HTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr: addr, Handler: http.MaxBytesHandler(h, MaxBodyBytes),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 90 * time.Second, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: 64 << 10,
	}
}

// pathID returns a UUID path parameter; anything else cannot exist: 404.
func pathID(c echo.Context, name string) (string, error) {
	id := c.Param(name)
	if !wire.ValidID(id) {
		return "", errNotFound
	}
	return id, nil
}
