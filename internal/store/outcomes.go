package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// IsFailure reports whether a result counts towards auto-disable.
// overlap_skipped is reported but is neither a success nor a failure: it
// leaves the failure counter alone.
func IsFailure(r wire.Result) bool {
	return r != wire.ResultSuccess && r != wire.ResultOverlapSkipped && r != wire.ResultPlatformError
}

// Run is one recorded execution (or skip) of a cron job.
type Run struct {
	ID            int64       `json:"id"`
	RunKey        string      `json:"run_key"`
	CronJobID     string      `json:"cron_job_id"`
	Version       int64       `json:"version"`
	NodeID        *string     `json:"node_id"`
	ScheduledAt   time.Time   `json:"scheduled_at"`
	StartedAt     *time.Time  `json:"started_at"`
	FinishedAt    *time.Time  `json:"finished_at"`
	DurationMS    *int64      `json:"duration_ms"`
	Result        wire.Result `json:"result"`
	ExitCode      *int        `json:"exit_code"`
	Signal        *string     `json:"signal"`
	FailureReason string      `json:"failure_reason"`
	ReceivedAt    time.Time   `json:"received_at"`
}

// Outcome is what a node reports after a run.
type Outcome struct {
	RunKey        string
	Version       int64
	ScheduledAt   time.Time
	StartedAt     *time.Time
	FinishedAt    *time.Time
	Result        wire.Result
	ExitCode      *int
	Signal        *string
	FailureReason string
}

// OutcomeResult tells what recording an outcome did.
type OutcomeResult struct {
	Duplicate    bool // the run key was known: nothing changed
	AutoDisabled bool // this outcome crossed the threshold
	Job          CronJob
}

// RecordOutcome stores a node's outcome for a job on that node's shard. In
// one transaction it inserts the run (idempotent by run key), resets or
// increments the failure counter and, at the threshold, auto-disables the
// job and queues the disable on all nodes. The job row is locked first so
// concurrent outcomes of one job count one after another.
func (s *Store) RecordOutcome(ctx context.Context, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	var res OutcomeResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		job, err := scanJob(tx.QueryRow(ctx, `
			SELECT `+jobColumns+` FROM cron_jobs
			WHERE id = $1 AND tenant_id IN (SELECT id FROM tenants WHERE shard_id = $2) FOR UPDATE`, jobID, node.ShardID))
		if err != nil {
			return notFound(err, "outcome: cron job on this node's shard")
		}
		res.Job = job
		var duration *int64
		if o.StartedAt != nil && o.FinishedAt != nil {
			d := o.FinishedAt.Sub(*o.StartedAt).Milliseconds()
			duration = &d
		}
		// A late outcome replaces a run the sweeper recorded as lost; that
		// slot was already counted as a failure, so it is not counted again.
		var inserted bool
		err = tx.QueryRow(ctx, `
			INSERT INTO cron_job_runs (run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at,
			                           duration_ms, result, exit_code, signal, failure_reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (run_key) DO UPDATE SET node_id = EXCLUDED.node_id, started_at = EXCLUDED.started_at,
			       finished_at = EXCLUDED.finished_at, duration_ms = EXCLUDED.duration_ms, result = EXCLUDED.result,
			       exit_code = EXCLUDED.exit_code, signal = EXCLUDED.signal,
			       failure_reason = EXCLUDED.failure_reason, received_at = now()
			WHERE cron_job_runs.result = 'lost'
			RETURNING xmax = 0`,
			o.RunKey, jobID, o.Version, node.ID, o.ScheduledAt, o.StartedAt, o.FinishedAt, duration,
			o.Result, o.ExitCode, o.Signal, o.FailureReason).Scan(&inserted)
		if errors.Is(err, pgx.ErrNoRows) {
			res.Duplicate = true // known run key: a redelivery changes nothing
			return nil
		}
		if err != nil {
			return fmt.Errorf("outcome: insert run: %w", err)
		}
		if !inserted {
			return nil
		}
		res.Job, res.AutoDisabled, err = countResult(ctx, tx, job, o.Result)
		return err
	})
	return res, err
}

// countResult applies one run result to the job's failure counter.
func countResult(ctx context.Context, tx pgx.Tx, job CronJob, result wire.Result) (CronJob, bool, error) {
	switch {
	case result == wire.ResultOverlapSkipped:
		return job, false, nil
	case !IsFailure(result):
		if job.ConsecutiveFailures == 0 {
			return job, false, nil
		}
		job.ConsecutiveFailures = 0
		_, err := tx.Exec(ctx, `UPDATE cron_jobs SET consecutive_failures = 0 WHERE id = $1`, job.ID)
		return job, false, wrap(err, "reset failure counter")
	}
	job.ConsecutiveFailures++
	trip := job.MaxFailures > 0 && job.ConsecutiveFailures >= job.MaxFailures &&
		job.Enabled && job.Status != wire.StatusAutoDisabled && job.Status != wire.StatusDeleting
	if !trip {
		_, err := tx.Exec(ctx, `UPDATE cron_jobs SET consecutive_failures = $2 WHERE id = $1`, job.ID, job.ConsecutiveFailures)
		return job, false, wrap(err, "count failure")
	}
	msg := fmt.Sprintf("disabled after %d consecutive failures", job.ConsecutiveFailures)
	job, err := scanJob(tx.QueryRow(ctx, `
		UPDATE cron_jobs SET consecutive_failures = $2, enabled = false, status = 'auto_disabled', status_message = $3,
		       version = version + 1, updated_at = now()
		WHERE id = $1 RETURNING `+jobColumns, job.ID, job.ConsecutiveFailures, msg))
	if err != nil {
		return job, false, wrap(err, "auto-disable")
	}
	return job, true, queueTask(ctx, tx, job.ID, wire.ActionAutoDisable, job.Version)
}

func wrap(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// ListRuns returns a job's runs, newest slot first.
func (s *Store) ListRuns(ctx context.Context, jobID string, limit int) ([]Run, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at, duration_ms,
		       result, exit_code, signal, failure_reason, received_at
		FROM cron_job_runs WHERE cron_job_id = $1 ORDER BY scheduled_at DESC, id DESC LIMIT $2`, jobID, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Run])
}
