package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeletedJob is what is left of a job once its delete finished (its
// tombstone, migration 021): enough to tell whose its run history is.
type DeletedJob struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	DeletedAt time.Time `json:"deleted_at"`
}

// GetDeletedJob returns the tombstone of a deleted job; ErrNotFound if
// the id names none (a live job, an unknown id, or a tombstone pruned
// with the last of its runs).
func (s *Store) GetDeletedJob(ctx context.Context, id string) (DeletedJob, error) {
	var d DeletedJob
	err := s.pool.QueryRow(ctx, `SELECT id, tenant_id, name, version, created_at, deleted_at
		FROM deleted_cron_jobs WHERE id = $1`, id).Scan(&d.ID, &d.TenantID, &d.Name, &d.Version, &d.CreatedAt, &d.DeletedAt)
	return d, notFound(err, "get deleted cron job")
}

// FinishDelete removes a job marked for deletion and leaves its tombstone
// in the same transaction, so its runs (which stay for the run retention)
// always have an owner the runs API can check. Its starts go: a deleted
// job runs nowhere (units on nodes that were unreachable go at their next
// converge, and a run they still finish is recorded under the tombstone:
// recordLateOutcome).
func (s *Store) FinishDelete(ctx context.Context, id string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		job, err := scanJob(tx.QueryRow(ctx, `DELETE FROM cron_jobs WHERE id = $1 AND status = 'deleting' RETURNING `+jobColumns, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // gone already, or not being deleted
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO deleted_cron_jobs (id, tenant_id, name, version, created_at)
			VALUES ($1, $2, $3, $4, $5)`, job.ID, job.TenantID, job.Name, job.Version, job.CreatedAt); err != nil {
			return fmt.Errorf("tombstone: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM cron_job_run_starts WHERE cron_job_id = $1`, job.ID); err != nil {
			return fmt.Errorf("drop run starts: %w", err)
		}
		return recordEvent(ctx, tx, job, ActorSystem, "deleted", nil)
	})
	return wrap(err, "finish delete")
}

// recordLateOutcome records an outcome of a job deleted since the run
// (a node that was partitioned through the delete, a spooled report):
// the run happened, so it joins the job's history under its tombstone,
// by the same rules as a live job's record (idempotent by run key, a real
// result replaces a placeholder, no version above the job's last). Nothing
// acts on it: no failure count, last run, sweep or notification, since
// there is no job left to disable, show or notify about. ErrNotFound when
// the id has no tombstone on the node's shard either.
func recordLateOutcome(ctx context.Context, tx pgx.Tx, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	res := OutcomeResult{Deleted: true}
	var d DeletedJob
	// The tombstone's lock orders two reports of one run, as a job's
	// row lock does.
	err := tx.QueryRow(ctx, `SELECT id, tenant_id, name, version FROM deleted_cron_jobs
		WHERE id = $1 AND tenant_id IN (SELECT id FROM tenants WHERE shard_id = $2) FOR UPDATE`,
		jobID, node.ShardID).Scan(&d.ID, &d.TenantID, &d.Name, &d.Version)
	if err != nil {
		return res, notFound(err, "outcome: cron job on this node's shard")
	}
	res.Job = CronJob{ID: d.ID, TenantID: d.TenantID, JobFields: JobFields{Name: d.Name}, Version: d.Version}
	if o.Version > d.Version {
		return res, fmt.Errorf("%w: %d, the deleted job was at %d", ErrVersionAhead, o.Version, d.Version)
	}
	stored, err := storedResult(ctx, tx, jobID, o.RunKey)
	if err != nil {
		return res, err
	}
	step := decideRecord(stored.result(), o.Result)
	if step == duplicateRun {
		res.Duplicate = true
		return res, nil
	}
	// No warnings: the tombstone keeps no limits to compare with.
	if _, err := writeRun(ctx, tx, node, jobID, o, stored, []string{}); err != nil {
		return res, err
	}
	res.Replaced = step == replaceRun
	return res, nil
}

// pruneDeletedJobs removes the tombstones of jobs deleted before cutoff
// whose runs are all gone: a run recorded after the delete (a late
// outcome) keeps its owner until the run itself is pruned. A tombstone
// a late outcome holds (recordLateOutcome locks it) is skipped, not
// waited for: the check for runs was made before that outcome's run
// existed, and deleting after the wait would orphan the run.
func (c Chores) pruneDeletedJobs(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := c.deleteBatched(ctx, `DELETE FROM deleted_cron_jobs WHERE id IN
		(SELECT d.id FROM deleted_cron_jobs d WHERE d.deleted_at < $1
		   AND NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE r.cron_job_id = d.id) LIMIT 5000 FOR UPDATE SKIP LOCKED)`, cutoff)
	if err != nil {
		return n, fmt.Errorf("prune deleted cron jobs: %w", err)
	}
	return n, nil
}
