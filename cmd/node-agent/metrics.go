package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/unitmgr"
)

// nodeMetrics is the agent's registry: the counters the unit manager and
// the log shipper feed (nm), and gauges read at scrape from what the
// agent keeps anyway: the unit directory, the outcome spool, the clock
// offset file, the shipper's drop counter.
func nodeMetrics(cfg nodeconf.Config, log *slog.Logger) (*prometheus.Registry, *metrics.Node) {
	reg := prometheus.NewRegistry()
	nm := metrics.NewNode(reg)
	reg.MustRegister(&metrics.NodeCollector{Sources: nodeSources(cfg), Log: log})
	return reg, nm
}

func nodeSources(cfg nodeconf.Config) metrics.NodeSources {
	s := metrics.NodeSources{
		Timers: func() (int, int, error) { return unitmgr.CountTimers(cfg.UnitDir) },
		Spool:  func() (int, int, time.Time, error) { return outcome.SpoolStats(cfg.SpoolDir) },
		Clock: func() (float64, time.Time, error) {
			r, err := clockoffset.Read(cfg.StateDir)
			return r.OffsetSeconds, r.MeasuredAt, err
		},
	}
	if cfg.LokiURL != "" { // otherwise nothing ships here (Vector may)
		s.LogDropped = func() int64 { b, _, _ := logship.Dropped(); return b }
	}
	return s
}

// closeMetrics stops the metrics listener at the agent's end.
func closeMetrics(srv *metrics.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Close(ctx); err != nil {
		log.Warn("metrics listener", "err", err)
	}
}
