package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// maxLostPerSweep bounds the work one sweep does for one job.
const maxLostPerSweep = 500

// SweepLostRuns records, for every active job, each slot that ended more
// than timeout + grace ago and for which no node reported anything, as a
// failed ("lost") run. A node that died mid-run never reports, so this is
// how such a run ends up failed. It returns how many runs it recorded and
// how many jobs it auto-disabled.
func (s *Store) SweepLostRuns(ctx context.Context, now time.Time, grace time.Duration) (lost, disabled int, err error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM cron_jobs WHERE enabled AND status = 'active'
		AND swept_until < $1::timestamptz - make_interval(secs => timeout_seconds) - $2::interval`, now, grace)
	if err != nil {
		return 0, 0, fmt.Errorf("sweep: list jobs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, 0, fmt.Errorf("sweep: list jobs: %w", err)
	}
	for _, id := range ids {
		n, auto, err := s.sweepJob(ctx, id, now, grace)
		if err != nil {
			return lost, disabled, err
		}
		lost += n
		if auto {
			disabled++
		}
	}
	return lost, disabled, nil
}

func (s *Store) sweepJob(ctx context.Context, id string, now time.Time, grace time.Duration) (int, bool, error) {
	lost, auto := 0, false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var sweptUntil time.Time
		job, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 AND enabled AND status = 'active' FOR UPDATE`, id))
		if err != nil {
			return nil // changed since listed; the next sweep looks again
		}
		if err := tx.QueryRow(ctx, `SELECT swept_until FROM cron_jobs WHERE id = $1`, id).Scan(&sweptUntil); err != nil {
			return fmt.Errorf("sweep %s: %w", id, err)
		}
		sched, err := schedule.ParseWithSeconds(job.Schedule, job.Timezone)
		if err != nil {
			return fmt.Errorf("sweep %s: stored schedule: %w", id, err)
		}
		cutoff := now.Add(-time.Duration(job.TimeoutSeconds)*time.Second - grace)
		at := sweptUntil
		for n := 0; n < maxLostPerSweep; n++ {
			slot := sched.Next(at)
			if slot.IsZero() || slot.After(cutoff) {
				break
			}
			at = slot
			var seen bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at = $2)`,
				id, slot).Scan(&seen); err != nil {
				return fmt.Errorf("sweep %s: %w", id, err)
			}
			if seen {
				continue
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, failure_reason)
				VALUES ($1, $2, $3, $4, 'lost', $5) ON CONFLICT (run_key) DO NOTHING`,
				runkey.Scheduled(id, slot), id, job.Version, slot,
				fmt.Sprintf("no node reported an outcome within timeout + %s; the node running it may have died", grace)); err != nil {
				return fmt.Errorf("sweep %s: record lost run: %w", id, err)
			}
			lost++
			var tripped bool
			if job, tripped, err = countResult(ctx, tx, job, wire.ResultLost); err != nil {
				return err
			}
			auto = auto || tripped
		}
		if at.Before(cutoff) && lost < maxLostPerSweep {
			at = cutoff
		}
		_, err = tx.Exec(ctx, `UPDATE cron_jobs SET swept_until = $2 WHERE id = $1`, id, at)
		return wrap(err, "sweep: advance")
	})
	return lost, auto, err
}

// DeleteRunsBefore removes run history older than cutoff, in batches so a
// large backlog does not hold long locks. It returns how many it removed.
func (s *Store) DeleteRunsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM cron_job_runs WHERE id IN
			(SELECT id FROM cron_job_runs WHERE received_at < $1 LIMIT 5000)`, cutoff)
		if err != nil {
			return total, fmt.Errorf("delete old runs: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}
