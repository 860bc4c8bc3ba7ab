// Package housekeeping runs the core API's periodic chores: recording lost
// runs, reporting nodes that are not converged to the operator, deleting
// old run history and expired create idempotency keys, and pruning the
// dispatched outbox. With several core-api replicas only the
// one holding the housekeeping leader lock does them, so no slot is swept
// twice.
package housekeeping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Config sets the chores' timing.
type Config struct {
	Interval   time.Duration // how often to sweep (default 30s)
	Grace      time.Duration // how long after timeout an outcome may still arrive (default 2m)
	Retention  time.Duration // how long runs are kept (default 180 days)
	PruneAfter time.Duration // how long dispatched outbox rows are kept (default 1h)
	// Leader bounds the leader session: keepalive, duty and lock timeouts.
	Leader store.LeaderConfig
	// Registry gets hostcron_sweep_skipped_jobs_total; nil: not exported.
	Registry prometheus.Registerer
	// Metrics count the lost runs the sweep records (hostcron_runs_total,
	// hostcron_shard_runs_total); nil: not counted.
	Metrics *metrics.Core
	// ConvergeThreshold is how long a node may go without a recorded
	// successful converge before the operator hears of it
	// (node_not_converged; 0: notify.ConvergeThreshold; negative: no
	// periodic check, failures still notify). The core derives it from
	// its converge schedule (ConvergeThresholdFor).
	ConvergeThreshold time.Duration
}

// ConvergeThresholdFor is the overdue threshold for a converge schedule of
// every: three periods (a node may miss two before it is reported, never
// at each period's edge), at least notify.ConvergeThreshold; none without
// a schedule (nodes converge only when they announce, so a quiet node is
// not overdue).
func ConvergeThresholdFor(every time.Duration) time.Duration {
	if every <= 0 {
		return -1
	}
	return max(3*every, notify.ConvergeThreshold)
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
	if c.PruneAfter <= 0 {
		c.PruneAfter = time.Hour
	}
	if c.ConvergeThreshold == 0 {
		c.ConvergeThreshold = notify.ConvergeThreshold
	}
}

// Housekeeper does the chores while it holds the leader lock.
type Housekeeper struct {
	Store   *store.Store
	Config  Config
	Log     *slog.Logger
	leader  *store.Leader
	skipped prometheus.Counter
}

// Run sweeps until ctx ends. It waits one grace period before the first
// sweep, so that outcomes nodes spooled while the API was down arrive
// before their slots could be taken for lost.
func Run(ctx context.Context, st *store.Store, cfg Config, log *slog.Logger) {
	h := &Housekeeper{Store: st, Config: cfg, Log: log}
	h.Config.defaults()
	if h.Config.Registry != nil {
		if err := h.Config.Registry.Register(h.skippedCounter()); err != nil {
			log.Warn("sweep metrics not registered", "err", err)
		}
	}
	defer h.Release()
	wait := h.Config.Grace
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = h.Config.Interval
		if _, err := h.Tick(ctx, time.Now()); err != nil && ctx.Err() == nil {
			log.Error("housekeeping", "err", err)
		}
	}
}

func (h *Housekeeper) skippedCounter() prometheus.Counter {
	if h.skipped == nil {
		h.skipped = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hostcron_sweep_skipped_jobs_total",
			Help: "Jobs a lost-run sweep could not check (e.g. a stored schedule that no longer parses).",
		})
	}
	return h.skipped
}

// Tick does one round of chores if this replica leads (taking the lead if
// it is free); led says whether it did. The chores run on the leader's
// session (store.Leader.Do), so none of their statements can commit once
// the lock is gone; a lead that ended is dropped and retaken at a later
// tick if it is free.
func (h *Housekeeper) Tick(ctx context.Context, now time.Time) (led bool, err error) {
	h.Config.defaults()
	if err := h.lead(ctx); err != nil || h.leader == nil {
		return false, err
	}
	err = h.leader.Do(ctx, func(ctx context.Context, c store.Chores) error { return h.chores(ctx, c, now) })
	switch {
	case ctx.Err() != nil:
		return false, ctx.Err() // stopping; Run releases the lead
	case errors.Is(err, store.ErrLeadLost):
		// Expected when a session ends (a PostgreSQL restart, a network
		// cut): drop logs why; a later tick takes the lead if it is free.
		h.drop()
		return false, nil
	}
	return true, err
}

// chores are one round of housekeeping on the leader's session.
func (h *Housekeeper) chores(ctx context.Context, c store.Chores, now time.Time) error {
	rep, err := c.SweepLostRuns(ctx, now, h.Config.Grace)
	for _, sk := range rep.Skipped {
		h.Log.Error("sweep skipped a cron job", "cron_job_id", sk.ID, "err", sk.Err)
	}
	h.skippedCounter().Add(float64(len(rep.Skipped)))
	h.countLost(ctx, c, rep) // what was recorded, even if the sweep then failed
	if err != nil {
		return fmt.Errorf("sweep lost runs: %w", err)
	}
	if rep.Lost > 0 || len(rep.Skipped) > 0 {
		h.Log.Warn("swept lost runs", "runs", rep.Lost, "skipped_jobs", len(rep.Skipped))
	}
	// A failed attempt whose retry never reported counts again: logged,
	// not fatal, like the convergence check.
	if n, err := c.ResolveDroppedRetries(ctx, now, store.RetryGrace); err != nil {
		h.Log.Error("resolve dropped retries", "err", err)
	} else if n > 0 {
		h.Log.Warn("retries that never reported: their failed attempts count again", "runs", n)
	}
	// Once per window and shard at most: repeated checks add nothing to
	// the window's event.
	// A failed check is logged, not fatal: retention and pruning below
	// must not wait on it.
	if h.Config.ConvergeThreshold > 0 {
		if _, err := c.CheckConvergence(ctx, now, h.Config.ConvergeThreshold); err != nil {
			h.Log.Error("convergence check", "err", err)
		}
	}
	if _, err := c.ExpireIdempotencyKeys(ctx); err != nil {
		return err
	}
	// Months ahead are created and whole months past the retention
	// dropped first; the batched delete below trims the rest. A month
	// that could not take its lock is logged, not fatal: the next pass
	// tries again, and the delete keeps the retention meanwhile.
	if created, dropped, err := c.RotateRunPartitions(ctx, now, now.Add(-h.Config.Retention)); err != nil {
		h.Log.Error("rotate run history partitions", "err", err, "created", created, "dropped", dropped)
	}
	if n, err := c.DeleteRunsBefore(ctx, now.Add(-h.Config.Retention)); err != nil {
		return err
	} else if n > 0 {
		h.Log.Info("deleted old runs", "runs", n)
	}
	if _, err := c.PruneDispatched(ctx, now.Add(-h.Config.PruneAfter)); err != nil {
		return err
	}
	// A start no record ended is a run the sweeper recorded lost (or a
	// node that went away); two days is far past any run's timeout.
	if _, err := c.PruneStarts(ctx, now.Add(-48*time.Hour)); err != nil {
		return err
	}
	if _, err := c.DeleteEventsBefore(ctx, now.Add(-h.Config.Retention)); err != nil {
		return err
	}
	// Notifications are kept as long as the runs they were about.
	if _, err := c.PruneNotifications(ctx, now.Add(-h.Config.Retention)); err != nil {
		return err
	}
	return nil
}

// countLost counts a sweep's lost runs by shard. A shard that cannot be
// read (the job deleted meanwhile, a database error) is counted as
// "unknown": the run was recorded all the same.
func (h *Housekeeper) countLost(ctx context.Context, c store.Chores, rep store.SweepReport) {
	if h.Config.Metrics == nil || len(rep.LostByJob) == 0 {
		return
	}
	ids := make([]string, 0, len(rep.LostByJob))
	for id := range rep.LostByJob {
		ids = append(ids, id)
	}
	shards, err := c.JobShards(ctx, ids)
	if err != nil {
		h.Log.Warn("lost runs counted without their shard", "err", err)
	}
	for id, n := range rep.LostByJob {
		shard, ok := shards[id]
		if !ok {
			shard = "unknown"
		}
		h.Config.Metrics.RunsRecorded(shard, wire.ResultLost, wire.TriggerScheduled, n)
	}
}

// lead keeps or takes the leader lock. A lead whose session ended (its
// keepalive could not confirm the lock) is dropped first: PostgreSQL has
// freed the lock for another replica, or frees it as the session closes.
func (h *Housekeeper) lead(ctx context.Context) error {
	if h.leader != nil {
		select {
		case <-h.leader.Lost():
			h.drop()
		default:
			return nil
		}
	}
	l, err := h.Store.TryLead(ctx, store.HousekeepingLeader, h.Config.Leader)
	if err != nil {
		return err
	}
	if l != nil {
		h.Log.Info("leading housekeeping", "session", l.PID())
	}
	h.leader = l
	return nil
}

// drop forgets a lead that ended, saying why.
func (h *Housekeeper) drop() {
	h.Log.Warn("lost the housekeeping lead", "err", h.leader.Err())
	h.Release()
}

// Release gives up the lead, if held.
func (h *Housekeeper) Release() {
	if h.leader != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.leader.Release(ctx)
		h.leader = nil
	}
}
