// Package housekeeping runs the core API's periodic chores: recording lost
// runs, deleting old run history and expired create idempotency keys.
package housekeeping

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/store"
)

// Config sets the chores' timing.
type Config struct {
	Interval  time.Duration // how often to sweep (default 30s)
	Grace     time.Duration // how long after timeout an outcome may still arrive (default 2m)
	Retention time.Duration // how long runs are kept (default 180 days)
	// Registry gets hostcron_sweep_skipped_jobs_total; nil: not exported.
	Registry prometheus.Registerer
}

func (c *Config) defaults() {
	if c.Interval <= 0 {
		c.Interval = 30 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 2 * time.Minute
	}
	if c.Retention <= 0 {
		c.Retention = 180 * 24 * time.Hour
	}
}

// Run sweeps until ctx ends. It waits one grace period before the first
// sweep, so that outcomes nodes spooled while the API was down arrive
// before their slots could be taken for lost.
func Run(ctx context.Context, st *store.Store, cfg Config, log *slog.Logger) {
	cfg.defaults()
	skipped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hostcron_sweep_skipped_jobs_total",
		Help: "Jobs a lost-run sweep could not check (e.g. a stored schedule that no longer parses).",
	})
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(skipped); err != nil {
			log.Warn("sweep metrics not registered", "err", err)
		}
	}
	wait := cfg.Grace
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = cfg.Interval
		rep, err := st.SweepLostRuns(ctx, time.Now(), cfg.Grace)
		for _, sk := range rep.Skipped {
			log.Error("sweep skipped a cron job", "cron_job_id", sk.ID, "err", sk.Err)
		}
		skipped.Add(float64(len(rep.Skipped)))
		if err != nil && ctx.Err() == nil {
			log.Error("sweep lost runs", "err", err)
		} else if rep.Lost > 0 || len(rep.Skipped) > 0 {
			log.Warn("swept lost runs", "runs", rep.Lost, "skipped_jobs", len(rep.Skipped))
		}
		if _, err := st.ExpireIdempotencyKeys(ctx); err != nil && ctx.Err() == nil {
			log.Error("expire idempotency keys", "err", err)
		}
		n, err := st.DeleteRunsBefore(ctx, time.Now().Add(-cfg.Retention))
		if err != nil && ctx.Err() == nil {
			log.Error("delete old runs", "err", err)
		} else if n > 0 {
			log.Info("deleted old runs", "runs", n)
		}
	}
}
