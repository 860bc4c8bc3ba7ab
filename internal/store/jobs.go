package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// Job statuses.

// CronJob is a tenant's cron job as stored.
type CronJob struct {
	ID                  string      `json:"id"`
	TenantID            string      `json:"tenant_id"`
	WebrootID           string      `json:"webroot_id"`
	Schedule            string      `json:"schedule"`
	Timezone            string      `json:"timezone"`
	Command             string      `json:"command"`
	WorkingDirectory    string      `json:"working_directory"`
	Enabled             bool        `json:"enabled"`
	TimeoutSeconds      int         `json:"timeout_seconds"`
	MaxMemoryMB         int         `json:"max_memory_mb"`
	MaxFailures         int         `json:"max_failures"`
	ConsecutiveFailures int         `json:"consecutive_failures"`
	Status              wire.Status `json:"status"`
	StatusMessage       string      `json:"status_message"`
	Version             int64       `json:"version"`
	CreatedAt           time.Time   `json:"created_at"`
	UpdatedAt           time.Time   `json:"updated_at"`
}

// JobSpec is what a tenant sets on a cron job; the API validates it.
type JobSpec struct {
	WebrootID        string
	Schedule         string
	Timezone         string
	Command          string
	WorkingDirectory string
	Enabled          bool
	TimeoutSeconds   int
	MaxMemoryMB      int
	MaxFailures      int
}

const jobColumns = `id, tenant_id, webroot_id, schedule, timezone, command, working_directory, enabled,
	timeout_seconds, max_memory_mb, max_failures, consecutive_failures, status, status_message, version,
	created_at, updated_at`

func scanJob(row pgx.Row) (CronJob, error) {
	var j CronJob
	err := row.Scan(&j.ID, &j.TenantID, &j.WebrootID, &j.Schedule, &j.Timezone, &j.Command, &j.WorkingDirectory,
		&j.Enabled, &j.TimeoutSeconds, &j.MaxMemoryMB, &j.MaxFailures, &j.ConsecutiveFailures, &j.Status,
		&j.StatusMessage, &j.Version, &j.CreatedAt, &j.UpdatedAt)
	return j, err
}

// queueTask adds an outbox row for the workflows, inside tx.
func queueTask(ctx context.Context, tx pgx.Tx, jobID string, action wire.Action, version int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version) VALUES ($1, $2, $3)`,
		jobID, action, version)
	if err != nil {
		return fmt.Errorf("queue %s task: %w", action, err)
	}
	return nil
}

// CreateJob stores a job for a tenant and queues its provisioning. The
// webroot must belong to the tenant.
func (s *Store) CreateJob(ctx context.Context, tenantID string, spec JobSpec) (CronJob, error) {
	var job CronJob
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRow(ctx, `
			INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, timezone, command, working_directory, enabled,
			                       timeout_seconds, max_memory_mb, max_failures)
			SELECT w.tenant_id, w.id, $3, $4, $5, $6, $7, $8, $9, $10 FROM webroots w WHERE w.id = $2 AND w.tenant_id = $1
			RETURNING `+jobColumns,
			tenantID, spec.WebrootID, spec.Schedule, spec.Timezone, spec.Command, spec.WorkingDirectory, spec.Enabled,
			spec.TimeoutSeconds, spec.MaxMemoryMB, spec.MaxFailures))
		if err != nil {
			return notFound(err, "create cron job: webroot")
		}
		return queueTask(ctx, tx, job.ID, wire.ActionCreate, job.Version)
	})
	return job, err
}

// GetJob returns a job, whatever its tenant; callers check the scope.
func (s *Store) GetJob(ctx context.Context, id string) (CronJob, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1`, id))
	return j, notFound(err, "get cron job")
}

// ListJobs lists a tenant's jobs, oldest first.
func (s *Store) ListJobs(ctx context.Context, tenantID string) ([]CronJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE tenant_id = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list cron jobs: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (CronJob, error) { return scanJob(r) })
}

// transition locks a job, lets decide check and change it, and stores the
// result with a bumped version and a queued task, all in one transaction.
// decide returns the task action, or "" to store nothing.
func (s *Store) transition(ctx context.Context, id string, decide func(j *CronJob) (wire.Action, error)) (CronJob, error) {
	var job CronJob
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return notFound(err, "cron job")
		}
		action, err := decide(&job)
		if err != nil || action == "" {
			return err
		}
		job, err = scanJob(tx.QueryRow(ctx, `
			UPDATE cron_jobs SET webroot_id = $2, schedule = $3, timezone = $4, command = $5, working_directory = $6,
			       enabled = $7, timeout_seconds = $8, max_memory_mb = $9, max_failures = $10,
			       consecutive_failures = $11, status = $12, status_message = $13,
			       version = version + 1, swept_until = now(), updated_at = now()
			WHERE id = $1 RETURNING `+jobColumns,
			id, job.WebrootID, job.Schedule, job.Timezone, job.Command, job.WorkingDirectory, job.Enabled,
			job.TimeoutSeconds, job.MaxMemoryMB, job.MaxFailures, job.ConsecutiveFailures, job.Status, job.StatusMessage))
		if err != nil {
			return fmt.Errorf("update cron job: %w", err)
		}
		return queueTask(ctx, tx, id, action, job.Version)
	})
	return job, err
}

func notDeleting(j *CronJob) error {
	if j.Status == wire.StatusDeleting {
		return conflict("cron job is being deleted")
	}
	return nil
}

// UpdateJob replaces the tenant-settable fields. The webroot must belong to
// the job's tenant. An auto-disabled job stays disabled until enabled.
func (s *Store) UpdateJob(ctx context.Context, id string, spec JobSpec) (CronJob, error) {
	return s.transition(ctx, id, func(j *CronJob) (wire.Action, error) {
		if err := notDeleting(j); err != nil {
			return "", err
		}
		if spec.WebrootID != j.WebrootID {
			var owner string
			err := s.pool.QueryRow(ctx, `SELECT tenant_id FROM webroots WHERE id = $1`, spec.WebrootID).Scan(&owner)
			if errors.Is(err, pgx.ErrNoRows) || (err == nil && owner != j.TenantID) {
				return "", fmt.Errorf("update cron job: webroot: %w", ErrNotFound)
			}
			if err != nil {
				return "", fmt.Errorf("update cron job: webroot: %w", err)
			}
		}
		enabled := spec.Enabled
		if j.Status == wire.StatusAutoDisabled {
			enabled = false // only enable and retry lift an auto-disable
		} else {
			j.Status, j.StatusMessage = wire.StatusPending, ""
		}
		j.WebrootID, j.Schedule, j.Timezone, j.Command = spec.WebrootID, spec.Schedule, spec.Timezone, spec.Command
		j.WorkingDirectory, j.Enabled, j.TimeoutSeconds = spec.WorkingDirectory, enabled, spec.TimeoutSeconds
		j.MaxMemoryMB, j.MaxFailures = spec.MaxMemoryMB, spec.MaxFailures
		return wire.ActionUpdate, nil
	})
}

// DeleteJob marks a job for deletion; the delete workflow removes its units
// and then the row. Deleting twice is not an error.
func (s *Store) DeleteJob(ctx context.Context, id string) (CronJob, error) {
	return s.transition(ctx, id, func(j *CronJob) (wire.Action, error) {
		if j.Status == wire.StatusDeleting {
			return "", nil
		}
		j.Status, j.StatusMessage, j.Enabled = wire.StatusDeleting, "", false
		return wire.ActionDelete, nil
	})
}

// EnableJob enables a job; it lifts an auto-disable and resets the failure
// counter.
func (s *Store) EnableJob(ctx context.Context, id string) (CronJob, error) {
	return s.transition(ctx, id, func(j *CronJob) (wire.Action, error) {
		if err := notDeleting(j); err != nil {
			return "", err
		}
		j.Enabled, j.ConsecutiveFailures, j.Status, j.StatusMessage = true, 0, wire.StatusPending, ""
		return wire.ActionEnable, nil
	})
}

// DisableJob disables a job on all nodes.
func (s *Store) DisableJob(ctx context.Context, id string) (CronJob, error) {
	return s.transition(ctx, id, func(j *CronJob) (wire.Action, error) {
		if err := notDeleting(j); err != nil {
			return "", err
		}
		j.Enabled, j.Status, j.StatusMessage = false, wire.StatusPending, ""
		return wire.ActionDisable, nil
	})
}

// RetryJob re-runs provisioning of a failed, pending or auto-disabled job;
// an auto-disabled job is enabled again with its counter reset.
func (s *Store) RetryJob(ctx context.Context, id string) (CronJob, error) {
	return s.transition(ctx, id, func(j *CronJob) (wire.Action, error) {
		switch j.Status {
		case wire.StatusFailed, wire.StatusPending:
		case wire.StatusAutoDisabled:
			j.Enabled = true
		default:
			return "", conflict("only a failed, pending or auto_disabled cron job can be retried; this one is %s", j.Status)
		}
		j.ConsecutiveFailures, j.Status, j.StatusMessage = 0, wire.StatusPending, ""
		return wire.ActionRetry, nil
	})
}

// RunNow queues one run outside the schedule. The job keeps its version:
// the run is keyed by the request time.
func (s *Store) RunNow(ctx context.Context, id string) (CronJob, error) {
	var job CronJob
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 FOR SHARE`, id))
		if err != nil {
			return notFound(err, "cron job")
		}
		if job.Status != wire.StatusActive && job.Status != wire.StatusDisabled {
			return conflict("cron job is %s; it can run now once it is provisioned (active or disabled)", job.Status)
		}
		return queueTask(ctx, tx, id, wire.ActionRunNow, job.Version)
	})
	return job, err
}

// SetProvisioned records the workflow's verdict for a version of a job. It
// changes nothing if the job has moved on (another version) or left
// pending, so a slow workflow cannot overwrite a newer state such as
// auto_disabled.
func (s *Store) SetProvisioned(ctx context.Context, id string, version int64, status wire.Status, message string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE cron_jobs SET status = $3, status_message = $4, updated_at = now()
		WHERE id = $1 AND version = $2 AND status = 'pending'`, id, version, status, message)
	if err != nil {
		return false, fmt.Errorf("set provisioned: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Task is an outbox entry for the workflows.
type Task struct {
	ID        int64       `json:"id"`
	CronJobID string      `json:"cron_job_id"`
	Action    wire.Action `json:"action"`
	Version   int64       `json:"version"`
	CreatedAt time.Time   `json:"created_at"`
}

// PendingTasks returns undispatched tasks in order.
func (s *Store) PendingTasks(ctx context.Context, limit int) ([]Task, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, cron_job_id, action, version, created_at FROM cron_job_tasks
		WHERE dispatched_at IS NULL ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("pending tasks: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Task])
}

// MarkDispatched records that a task was handed to the workflows.
func (s *Store) MarkDispatched(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE cron_job_tasks SET dispatched_at = now() WHERE id = $1`, id); err != nil {
		return fmt.Errorf("mark task %d dispatched: %w", id, err)
	}
	return nil
}

// FinishDelete removes a job marked for deletion, with its runs; units on
// nodes that were unreachable go at their next converge.
func (s *Store) FinishDelete(ctx context.Context, id string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM cron_jobs WHERE id = $1 AND status = 'deleting'`, id)
	return wrap(err, "finish delete")
}
