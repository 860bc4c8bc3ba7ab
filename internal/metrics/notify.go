package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Notify holds the notification worker's counters. A nil *Notify counts
// nothing.
type Notify struct {
	// hostcron_notification_deliveries_total{channel,kind,result}: every
	// attempt, result delivered, retry or failed (given up).
	Deliveries *prometheus.CounterVec
	// hostcron_notification_failures_total{channel,reason}: failed
	// attempts by a reason the code sets (status, network, refused_address,
	// redirect, smtp_permanent, smtp).
	Failures *prometheus.CounterVec
}

// NewNotify creates the worker's metrics and registers them on reg (nil:
// not registered).
func NewNotify(reg prometheus.Registerer) *Notify {
	m := &Notify{
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_notification_deliveries_total",
			Help: "Notification delivery attempts, by channel (webhook, email), event kind and result (delivered, retry, failed).",
		}, []string{"channel", "kind", "result"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_notification_failures_total",
			Help: "Failed notification delivery attempts, by channel and reason.",
		}, []string{"channel", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.Deliveries, m.Failures)
	}
	return m
}

// Attempted counts one attempt; reason is "" when it was delivered.
func (m *Notify) Attempted(channel, kind, result, reason string) {
	if m == nil {
		return
	}
	m.Deliveries.WithLabelValues(channel, kind, result).Inc()
	if reason != "" {
		m.Failures.WithLabelValues(channel, reason).Inc()
	}
}

// NotifySource reads how many deliveries wait (pending or held).
type NotifySource interface {
	PendingDeliveries(ctx context.Context) (int64, error)
}

var (
	notifyPendingDesc = prometheus.NewDesc("hostcron_notification_outbox_pending",
		"Notification deliveries pending or held (read from the database at scrape).", nil, nil)
	notifyUpDesc = prometheus.NewDesc("hostcron_notification_outbox_scrape_ok",
		"1 when the notification outbox could be read at this scrape, 0 when not.", nil, nil)
)

// NotifyCollector reads the notification outbox's depth at scrape, as
// OutboxCollector does for the job changes.
type NotifyCollector struct {
	Source  NotifySource
	Timeout time.Duration // default 2s
	Log     *slog.Logger
}

// Describe implements prometheus.Collector.
func (c *NotifyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- notifyPendingDesc
	ch <- notifyUpDesc
}

// Collect implements prometheus.Collector.
func (c *NotifyCollector) Collect(ch chan<- prometheus.Metric) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := c.Source.PendingDeliveries(ctx)
	if err != nil {
		if c.Log != nil {
			c.Log.Warn("metrics: notification outbox depth not read", "err", err)
		}
		ch <- prometheus.MustNewConstMetric(notifyUpDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(notifyUpDesc, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(notifyPendingDesc, prometheus.GaugeValue, float64(n))
}
