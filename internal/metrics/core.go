// Package metrics defines hostcron's Prometheus metrics: the core API's
// (Core, OutboxCollector) and the node agent's (Node, NodeCollector), and
// the listener both serve them on (Listen), apart from the tenant API.
// Counters are bumped by the code that does the work; gauges whose truth
// lives elsewhere (the database, the node's files) are read at scrape, so
// replicas and restarts do not make them diverge. It links neither the
// database driver nor D-Bus: both binaries import it.
package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/wire"
)

// Core holds the core API's counters and histograms. A nil *Core counts
// nothing, so parts started without metrics need no checks.
type Core struct {
	Runs          *prometheus.CounterVec   // hostcron_runs_total{result,trigger}
	ShardRuns     *prometheus.CounterVec   // hostcron_shard_runs_total{shard,result}
	IngestionLag  prometheus.Histogram     // hostcron_outcome_ingestion_lag_seconds
	AutoDisables  prometheus.Counter       // hostcron_auto_disables_total
	Requests      *prometheus.HistogramVec // hostcron_api_request_duration_seconds{method,route,code}
	DispatchLag   prometheus.Histogram     // hostcron_dispatch_lag_seconds
	Provisionings *prometheus.CounterVec   // hostcron_provisionings_total{result}
}

// NewCore creates the core's metrics and registers them on reg (nil: not
// registered).
func NewCore(reg prometheus.Registerer) *Core {
	m := &Core{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_runs_total",
			Help: "Runs recorded, by result and trigger: nodes' outcomes and the sweeper's lost runs.",
		}, []string{"result", "trigger"}),
		ShardRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_shard_runs_total",
			Help: "Runs recorded as lost or platform_error, by shard id: the platform's failures, never the tenant's.",
		}, []string{"shard", "result"}),
		IngestionLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hostcron_outcome_ingestion_lag_seconds",
			Help:    "Time from a run's end (the node's finished_at) to its outcome being recorded.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		AutoDisables: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hostcron_auto_disables_total", Help: "Cron jobs auto-disabled after consecutive failures.",
		}),
		Requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hostcron_api_request_duration_seconds", Help: "API latency by route, method and the status sent.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "code"}),
		DispatchLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hostcron_dispatch_lag_seconds",
			Help:    "Time from a change's outbox row being written to Temporal accepting its signal and the row being marked.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}),
		Provisionings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_provisionings_total",
			Help: "Provisioning verdicts reported by job workflows: the status reported (active, failed, disabled) when recorded, superseded when the job had moved on.",
		}, []string{"result"}),
	}
	// Every result and trigger starts at 0, so increase() sees a first run.
	for _, r := range append(append([]wire.Result(nil), wire.NodeResults...), wire.ResultLost) {
		for _, t := range wire.Triggers {
			m.Runs.WithLabelValues(string(r), string(t))
		}
	}
	if reg != nil {
		for _, c := range m.Collectors() {
			reg.MustRegister(c)
		}
	}
	return m
}

// InitShards starts the per-shard counters of shards at 0 (those already
// counting keep their value): a counter that first appears at 1 is a
// first failure increase() and the alerts built on it cannot see. The core
// calls it at start and every minute with the shards in the database.
func (m *Core) InitShards(shards []string) {
	if m == nil {
		return
	}
	for _, sh := range shards {
		for _, r := range []wire.Result{wire.ResultLost, wire.ResultPlatformError} {
			m.ShardRuns.WithLabelValues(sh, string(r))
		}
	}
}

// Collectors lists the metrics NewCore registers.
func (m *Core) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Runs, m.ShardRuns, m.IngestionLag, m.AutoDisables, m.Requests, m.DispatchLag, m.Provisionings}
}

// RunRecorded counts one run recorded for a job of shard: every result by
// trigger, and lost and platform_error also by shard.
func (m *Core) RunRecorded(shard string, result wire.Result, trigger wire.Trigger) {
	m.RunsRecorded(shard, result, trigger, 1)
}

// RunsRecorded is RunRecorded for n runs.
func (m *Core) RunsRecorded(shard string, result wire.Result, trigger wire.Trigger, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.Runs.WithLabelValues(string(result), string(trigger)).Add(float64(n))
	if result == wire.ResultLost || result == wire.ResultPlatformError {
		m.ShardRuns.WithLabelValues(shard, string(result)).Add(float64(n))
	}
}

// OutcomeIngested observes the lag of an outcome that finished at
// finished (nil: unknown) and was recorded at now.
func (m *Core) OutcomeIngested(finished *time.Time, now time.Time) {
	if m == nil || finished == nil {
		return
	}
	m.IngestionLag.Observe(max(0, now.Sub(*finished).Seconds()))
}

// AutoDisabled counts one auto-disable.
func (m *Core) AutoDisabled() {
	if m != nil {
		m.AutoDisables.Inc()
	}
}

// Dispatched observes the lag of an outbox row written at created.
func (m *Core) Dispatched(created, now time.Time) {
	if m != nil {
		m.DispatchLag.Observe(max(0, now.Sub(created).Seconds()))
	}
}

// ProvisioningSuperseded is the result label of a verdict the job had
// moved on from.
const ProvisioningSuperseded = "superseded"

// Provisioned counts a workflow's provisioning verdict: its status when
// recorded, ProvisioningSuperseded when not.
func (m *Core) Provisioned(status wire.Status, recorded bool) {
	if m == nil {
		return
	}
	result := string(status)
	switch {
	case !recorded:
		result = ProvisioningSuperseded
	case status != wire.StatusActive && status != wire.StatusFailed && status != wire.StatusDisabled:
		result = "other" // a label value set by the code, never open-ended
	}
	m.Provisionings.WithLabelValues(result).Inc()
}

// OutboxSource reads the outbox's depth: how many changes wait
// undispatched and when the oldest was written (ok false: none waits).
type OutboxSource interface {
	OutboxDepth(ctx context.Context) (pending int64, oldest time.Time, ok bool, err error)
}

// OutboxCollector reads the outbox's depth from the database at scrape,
// with a short timeout: every replica reports the same truth, so the
// numbers cannot diverge across replicas (alerts take max()).
type OutboxCollector struct {
	Source  OutboxSource
	Timeout time.Duration    // default 2s
	Now     func() time.Time // default time.Now
	Log     *slog.Logger
}

var (
	outboxPendingDesc = prometheus.NewDesc("hostcron_outbox_pending",
		"Changes in the outbox not yet dispatched to Temporal (read from the database at scrape).", nil, nil)
	outboxAgeDesc = prometheus.NewDesc("hostcron_outbox_oldest_pending_age_seconds",
		"Age of the oldest undispatched change (0: none waits).", nil, nil)
	outboxUpDesc = prometheus.NewDesc("hostcron_outbox_scrape_ok",
		"1 when the outbox could be read at this scrape, 0 when the database did not answer in time.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *OutboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxPendingDesc
	ch <- outboxAgeDesc
	ch <- outboxUpDesc
}

// Collect implements prometheus.Collector. A database that does not answer
// yields hostcron_outbox_scrape_ok 0 and no depth (rather than a stale or
// made-up one), and the rest of the scrape goes on.
func (c *OutboxCollector) Collect(ch chan<- prometheus.Metric) {
	timeout, now := c.Timeout, c.Now
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pending, oldest, ok, err := c.Source.OutboxDepth(ctx)
	if err != nil {
		if c.Log != nil {
			c.Log.Warn("metrics: outbox depth not read", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(outboxUpDesc, prometheus.GaugeValue, 0)
		return
	}
	age := 0.0
	if ok {
		age = max(0, now().Sub(oldest).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(outboxUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(outboxPendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(outboxAgeDesc, prometheus.GaugeValue, age)
}
