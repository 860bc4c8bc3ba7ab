package metrics

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Node holds the node agent's counters and histograms, bumped by the unit
// manager (as its observer) and the log shipper. A nil *Node counts
// nothing.
type Node struct {
	ApplyDuration  *prometheus.HistogramVec // hostcron_node_apply_duration_seconds{op,result}
	ReloadDuration prometheus.Histogram     // hostcron_node_reload_duration_seconds
	Steps          *prometheus.CounterVec   // hostcron_node_plan_steps_applied_total{kind}
	LastConverge   prometheus.Gauge         // hostcron_node_last_converge_timestamp_seconds
	LogShipLag     prometheus.Histogram     // hostcron_node_logship_lag_seconds
}

// NewNode creates the node agent's metrics and registers them on reg
// (nil: not registered).
func NewNode(reg prometheus.Registerer) *Node {
	m := &Node{
		ApplyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hostcron_node_apply_duration_seconds",
			Help:    "Plan and apply of the node's cron units, by operation (apply, reconcile, remove; batch: applies and removals the apply queue merged) and result (ok, error).",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"op", "result"}),
		ReloadDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hostcron_node_reload_duration_seconds",
			Help:    "systemd daemon-reloads an apply made.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}),
		Steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_node_plan_steps_applied_total",
			Help: "Plan steps the unit manager executed, by kind (write, remove, enable, disable, reload, start, ...).",
		}, []string{"kind"}),
		LastConverge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hostcron_node_last_converge_timestamp_seconds",
			Help: "When the core's last converge (a reconcile to the shard's desired set) succeeded on this node; 0: not since the agent started.",
		}),
		LogShipLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hostcron_node_logship_lag_seconds",
			Help:    "Time from the oldest line of a batch being written to the journal to Loki accepting the batch.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
	}
	if reg != nil {
		for _, c := range m.Collectors() {
			reg.MustRegister(c)
		}
	}
	return m
}

// Collectors lists the metrics NewNode registers.
func (m *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ApplyDuration, m.ReloadDuration, m.Steps, m.LastConverge, m.LogShipLag}
}

// Operation names the unit manager reports (unitmgr.Op); a converge is a
// reconcile.
const OpReconcile = "reconcile"

// Applied records one plan+apply: its duration, the steps it executed by
// kind and, for a successful reconcile that is not an operator's, the
// converge time. The unit manager calls it (unitmgr.Observer).
func (m *Node) Applied(op string, operator bool, took time.Duration, steps map[string]int, err error, at time.Time) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.ApplyDuration.WithLabelValues(op, result).Observe(took.Seconds())
	for kind, n := range steps {
		m.Steps.WithLabelValues(kind).Add(float64(n))
	}
	if op == OpReconcile && !operator && err == nil {
		m.LastConverge.Set(float64(at.UnixNano()) / 1e9)
	}
}

// Reloaded records one daemon-reload's duration.
func (m *Node) Reloaded(took time.Duration) {
	if m != nil {
		m.ReloadDuration.Observe(took.Seconds())
	}
}

// Shipped records a batch Loki accepted whose oldest line was written at
// oldest.
func (m *Node) Shipped(oldest, now time.Time) {
	if m != nil && !oldest.IsZero() {
		m.LogShipLag.Observe(max(0, now.Sub(oldest).Seconds()))
	}
}

// NodeSources is the state the node agent already has, read at scrape.
// A nil function leaves its metrics out.
type NodeSources struct {
	// Timers counts cron timers whose unit file exists and those enabled.
	Timers func() (present, enabled int, err error)
	// Spool reads the outcome spool: reports waiting, dead letters, and
	// when the oldest waiting one was spooled (zero: none waits).
	Spool func() (pending, dead int, oldest time.Time, err error)
	// Clock reads the last clock offset measured against the core (core
	// minus node) and when.
	Clock func() (offset float64, measured time.Time, err error)
	// LogDropped counts log batches Loki refused for good since start.
	LogDropped func() int64
}

// NodeCollector computes the node's gauges at scrape from NodeSources.
type NodeCollector struct {
	Sources NodeSources
	Now     func() time.Time // default time.Now
	Log     *slog.Logger
}

var (
	timersDesc = prometheus.NewDesc("hostcron_node_cron_timers",
		"Cron timers on this node: state=present (a timer unit file exists) or enabled (linked into timers.target).", []string{"state"}, nil)
	spoolDepthDesc = prometheus.NewDesc("hostcron_node_outcome_spool_pending",
		"Outcome reports waiting in the spool for the core to take them.", nil, nil)
	spoolAgeDesc = prometheus.NewDesc("hostcron_node_outcome_spool_oldest_age_seconds",
		"Age of the oldest report waiting in the spool (0: none waits).", nil, nil)
	deadDesc = prometheus.NewDesc("hostcron_node_outcome_dead_letters",
		"Outcome reports the core never took, in the spool's dead/ directory; each needs an operator.", nil, nil)
	clockDesc = prometheus.NewDesc("hostcron_node_clock_offset_seconds",
		"Last measured offset of the core API's clock against this node's (core minus node).", nil, nil)
	clockAtDesc = prometheus.NewDesc("hostcron_node_clock_offset_measured_timestamp_seconds",
		"When the clock offset was last measured.", nil, nil)
	droppedDesc = prometheus.NewDesc("hostcron_node_logship_dropped_batches_total",
		"Log batches Loki refused for good and the shipper dropped, since the agent started.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *NodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{timersDesc, spoolDepthDesc, spoolAgeDesc, deadDesc, clockDesc, clockAtDesc, droppedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A source that fails leaves its
// metrics out of this scrape (logged), not a made-up value.
func (c *NodeCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	s := c.Sources
	if s.Timers != nil {
		if present, enabled, err := s.Timers(); err != nil {
			c.warn("cron timers", err)
		} else {
			gauge(timersDesc, float64(present), "present")
			gauge(timersDesc, float64(enabled), "enabled")
		}
	}
	if s.Spool != nil {
		if pending, dead, oldest, err := s.Spool(); err != nil {
			c.warn("outcome spool", err)
		} else {
			age := 0.0
			if !oldest.IsZero() {
				age = max(0, now().Sub(oldest).Seconds())
			}
			gauge(spoolDepthDesc, float64(pending))
			gauge(spoolAgeDesc, age)
			gauge(deadDesc, float64(dead))
		}
	}
	if s.Clock != nil {
		if off, at, err := s.Clock(); err != nil {
			c.debug("clock offset", err) // none measured yet is normal at start
		} else {
			gauge(clockDesc, off)
			gauge(clockAtDesc, float64(at.UnixNano())/1e9)
		}
	}
	if s.LogDropped != nil {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(s.LogDropped()))
	}
}

func (c *NodeCollector) warn(what string, err error) {
	if c.Log != nil {
		c.Log.Warn("metrics: "+what+" not read", "err", err)
	}
}

func (c *NodeCollector) debug(what string, err error) {
	if c.Log != nil {
		c.Log.Debug("metrics: "+what+" not read", "err", err)
	}
}
