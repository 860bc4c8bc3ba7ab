package api

import (
	"net/http"
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
	routes       map[string]struct{} // route templates: the only route label values
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

// middleware times every request by its route template (not its path, to
// keep label cardinality bounded). It hands an error to Echo's error
// handler first, so the status it records is the one the client got (a
// store's not-found is a 404, not the 200 the response held before).
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err) // commits the response; Echo's own call then does nothing
		}
		m.latency.WithLabelValues(methodLabel(c.Request().Method), m.routeLabel(c.Path()),
			strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return nil
	}
}

// methodLabel keeps a client's made-up method out of the label values.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}

// routeLabel accepts only registered route templates; anything else (an
// unmatched path Echo may echo back) is "other".
func (m *metrics) routeLabel(path string) string {
	if _, ok := m.routes[path]; ok {
		return path
	}
	return "other"
}

// setRoutes records the server's route templates once they are registered.
func (m *metrics) setRoutes(routes []*echo.Route) {
	m.routes = map[string]struct{}{}
	for _, r := range routes {
		m.routes[r.Path] = struct{}{}
	}
}
