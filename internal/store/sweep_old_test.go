package store

// The lost-run sweep before sweep_due_at, verbatim but for its names; only
// BenchmarkSweep calls it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// SweepLostRunsPerJob is the sweep as it was before sweep_due_at (base
// commit 1e7655a): it lists every job whose swept_until lies before the
// cutoff and sweeps each in a transaction of its own, with a statement per
// slot. Kept, test-only, for BenchmarkSweep's comparison.
func (c Chores) SweepLostRunsPerJob(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
	var rep SweepReport
	// A NULL swept_until (no node has the current schedule yet) never
	// compares true: such a job is not listed, unless an old replica made
	// it active (sweepFrom decides).
	rows, err := c.db.Query(ctx, `SELECT id FROM cron_jobs WHERE enabled AND status IN ($3, $4)
		AND coalesce(swept_until, CASE WHEN status = $3 THEN updated_at END)
		    < $1::timestamptz - make_interval(secs => timeout_seconds) - $2::interval`,
		now, grace, wire.StatusActive, wire.StatusFailed)
	if err != nil {
		return rep, fmt.Errorf("sweep: list jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rep, fmt.Errorf("sweep: list jobs: %w", err)
	}
	for _, id := range ids {
		n, err := c.sweepJobOld(ctx, id, now, grace)
		if skipJob(ctx, err) {
			rep.Skipped = append(rep.Skipped, SkippedJob{ID: id, Err: err})
			continue
		}
		if err != nil {
			return rep, err
		}
		rep.Lost += n
	}
	return rep, nil
}

// sweepJobOld records the lost slots of one job. Slots start where sweepFrom
// says (swept_until, set when a node first had the job's current schedule;
// NULL until then, and the job is not swept; never before not_before). A
// lost record is keyed by the slot's run key, so a slot has one row
// whatever the job's version, and a slot a node reported (or an earlier
// sweep recorded) is left alone.
func (c Chores) sweepJobOld(ctx context.Context, id string, now time.Time, grace time.Duration) (int, error) {
	lost := 0
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		var sweptUntil *time.Time
		job, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs
			WHERE id = $1 AND enabled AND status IN ($2, $3) FOR UPDATE`, id, wire.StatusActive, wire.StatusFailed))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // changed since listed; the next sweep looks again
		}
		if err != nil {
			// A lock timeout aborted the transaction: returning nil
			// would commit it (and fail). It is rolled back; skipJob
			// decides whether the sweep goes on.
			return fmt.Errorf("sweep %s: lock job: %w", id, err)
		}
		var verdictAt time.Time
		var shardHasNode bool
		if err := tx.QueryRow(ctx, `SELECT j.swept_until, j.updated_at,
			       EXISTS (SELECT 1 FROM nodes n WHERE n.shard_id = t.shard_id AND NOT n.draining)
			FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id WHERE j.id = $1`, id).
			Scan(&sweptUntil, &verdictAt, &shardHasNode); err != nil {
			return fmt.Errorf("sweep %s: %w", id, err)
		}
		at, ok := sweepFrom(sweptUntil, job.Status, verdictAt, job.NotBefore, shardHasNode)
		if !ok {
			return nil // no node has the job's current schedule yet
		}
		sched, err := schedule.ParseWithSeconds(job.Schedule, job.Timezone)
		if err != nil {
			return fmt.Errorf("sweep %s: %w: %v", id, errBadSchedule, err)
		}
		cutoff := now.Add(-time.Duration(job.TimeoutSeconds)*time.Second - grace)
		reason := fmt.Sprintf("no node reported an outcome within timeout + %s; the node running it may have died", grace)
		caughtUp := false // every slot up to cutoff was looked at
		for n := 0; n < maxLostPerSweep; n++ {
			slot := sched.Next(at)
			if slot.IsZero() || slot.After(cutoff) {
				caughtUp = true
				break
			}
			at = slot
			tag, err := tx.Exec(ctx, `
				INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, failure_reason)
				VALUES (@run_key, @cron_job_id, @version, @scheduled_at, @result, @failure_reason)
				ON CONFLICT (run_key, scheduled_at) DO NOTHING`, pgx.NamedArgs{
				"run_key": runkey.Scheduled(id, slot), "cron_job_id": id, "version": job.Version,
				"scheduled_at": slot, "result": wire.ResultLost, "failure_reason": reason,
			})
			if err != nil {
				return fmt.Errorf("sweep %s: record lost run: %w", id, err)
			}
			lost += int(tag.RowsAffected())
		}
		if caughtUp && at.Before(cutoff) {
			at = cutoff
		}
		_, err = tx.Exec(ctx, `UPDATE cron_jobs SET swept_until = $2 WHERE id = $1`, id, at)
		return wrap(err, "sweep: advance")
	})
	return lost, err
}

// SweepLostRunsPerJob is Chores.SweepLostRunsPerJob on the pool.
func (s *Store) SweepLostRunsPerJob(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
	return Chores{s.pool}.SweepLostRunsPerJob(ctx, now, grace)
}
