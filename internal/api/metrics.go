package api

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/wire"
)

type metrics struct {
	runs         *prometheus.CounterVec
	lag          prometheus.Histogram
	autoDisables prometheus.Counter
	latency      *prometheus.HistogramVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hostcron_runs_total", Help: "Cron job runs recorded, by result.",
		}, []string{"result"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hostcron_outcome_ingestion_lag_seconds", Help: "Time from a run's end to its outcome being recorded.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}),
		autoDisables: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hostcron_auto_disables_total", Help: "Cron jobs auto-disabled after consecutive failures.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "hostcron_api_request_duration_seconds", Help: "API latency by route, method and status.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "code"}),
	}
	reg.MustRegister(m.runs, m.lag, m.autoDisables, m.latency)
	return m
}

func (m *metrics) observeOutcome(result wire.Result, finished *time.Time, now time.Time) {
	m.runs.WithLabelValues(string(result)).Inc()
	if finished != nil {
		m.lag.Observe(now.Sub(*finished).Seconds())
	}
}

// middleware times every request by its route pattern (not its path, to
// keep label cardinality bounded).
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		code := c.Response().Status
		if err != nil {
			if he, ok := err.(*echo.HTTPError); ok {
				code = he.Code
			} else if ae, ok := err.(*apiError); ok {
				code = ae.status
			}
		}
		m.latency.WithLabelValues(c.Request().Method, c.Path(), strconv.Itoa(code)).Observe(time.Since(start).Seconds())
		return err
	}
}
