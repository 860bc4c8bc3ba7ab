package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// CronJob is a tenant's cron job as stored.
type CronJob struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// JobFields are what the tenant sets; embedded, so they read and
	// encode as the job's own fields, in this order.
	JobFields
	ConsecutiveFailures int         `json:"consecutive_failures"`
	Status              wire.Status `json:"status"`
	StatusMessage       string      `json:"status_message"`
	Version             int64       `json:"version"`
	NotBefore           time.Time   `json:"not_before"`
	CreatedAt           time.Time   `json:"created_at"`
	UpdatedAt           time.Time   `json:"updated_at"`
	// DisabledReason is the tenant's reason of the last disable, kept
	// until the job is enabled again ("" when none was given).
	DisabledReason string `json:"disabled_reason"`
	// The newest run a node reported (decideLastRun), as a job listing
	// shows it.
	LastRuns
}

// LastRuns is what a job shows of its runs: the newest run a node
// reported (by slot, then record id; the sweeper's lost records are not
// reports) and the slot of the newest success. Outcome recording keeps it
// in the transaction that records the run.
type LastRuns struct {
	lastRunID *int64
	// LastRunAt is the slot (scheduled_at) of the newest run.
	LastRunAt  *time.Time   `json:"last_run_at"`
	LastResult *wire.Result `json:"last_result"`
	// LastFailureReason is that run's failure reason; "" when it succeeded.
	LastFailureReason string     `json:"last_failure_reason"`
	LastSuccessAt     *time.Time `json:"last_success_at"`
}

// JobFields are the fields a tenant sets on a cron job; the API validates
// them. (Not the node's jobspec.Spec.)
type JobFields struct {
	// Name is for people only (never sent to a node); "" when none.
	Name             string `json:"name"`
	WebrootID        string `json:"webroot_id"`
	Schedule         string `json:"schedule"`
	Timezone         string `json:"timezone"`
	Command          string `json:"command"`
	WorkingDirectory string `json:"working_directory"`
	Enabled          bool   `json:"enabled"`
	TimeoutSeconds   int    `json:"timeout_seconds"`
	MaxMemoryMB      int    `json:"max_memory_mb"`
	MaxFailures      int    `json:"max_failures"`
	// CatchUpWindowSeconds: a slot missed (a reboot, an outage, a late
	// fire) runs once, late, if it is at most this old; 0 never.
	CatchUpWindowSeconds int `json:"catchup_window_seconds"`
	// OverlapPolicy is what a slot does while the previous run still
	// runs (wire.OverlapPolicies; skip by default).
	OverlapPolicy wire.OverlapPolicy `json:"overlap_policy"`
	// Retries: how often a failed scheduled run is retried (0 to
	// wire.MaxRetries); RetryDelaySeconds: the wait before the first retry,
	// doubled for each later one (retryDelay).
	Retries           int `json:"retries"`
	RetryDelaySeconds int `json:"retry_delay_seconds"`
	// Environment are the command's variables (jobspec.ValidateEnvironment),
	// never nil once read ({} when none). Shown to the owning tenant only,
	// as every field of its job is.
	Environment map[string]string `json:"environment"`
}

var (
	// ErrPreconditionFailed: the job's version is not the one the caller
	// named (If-Match).
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrIdempotencyKeyReused: an Idempotency-Key came back with another
	// request.
	ErrIdempotencyKeyReused = errors.New("idempotency key reused with a different request")
	// ErrUnknownWebroot: the webroot does not exist or is another tenant's.
	ErrUnknownWebroot = fmt.Errorf("webroot: %w", ErrNotFound)
)

const jobColumns = `id, tenant_id, webroot_id, schedule, timezone, command, working_directory, enabled,
	timeout_seconds, max_memory_mb, max_failures, consecutive_failures, status, status_message, version,
	not_before, created_at, updated_at, name, disabled_reason, last_run_id, last_run_at, last_result,
	last_failure_reason, last_success_at, environment, catchup_window_seconds, overlap_policy, retries, retry_delay_seconds`

func scanJob(row pgx.Row) (CronJob, error) {
	var j CronJob
	err := row.Scan(&j.ID, &j.TenantID, &j.WebrootID, &j.Schedule, &j.Timezone, &j.Command, &j.WorkingDirectory,
		&j.Enabled, &j.TimeoutSeconds, &j.MaxMemoryMB, &j.MaxFailures, &j.ConsecutiveFailures, &j.Status,
		&j.StatusMessage, &j.Version, &j.NotBefore, &j.CreatedAt, &j.UpdatedAt, &j.Name, &j.DisabledReason,
		&j.lastRunID, &j.LastRunAt, &j.LastResult, &j.LastFailureReason, &j.LastSuccessAt, &j.Environment, &j.CatchUpWindowSeconds,
		&j.OverlapPolicy, &j.Retries, &j.RetryDelaySeconds)
	if j.Environment == nil {
		j.Environment = map[string]string{}
	}
	return j, err
}

// queueTask adds an outbox row for the workflows, inside tx.
func queueTask(ctx context.Context, tx pgx.Tx, jobID string, action wire.Action, version int64) error {
	_, err := queueTaskID(ctx, tx, jobID, action, version)
	return err
}

// queueTaskID is queueTask that returns the row's id (a run-now's request).
func queueTaskID(ctx context.Context, tx pgx.Tx, jobID string, action wire.Action, version int64) (int64, error) {
	var id int64
	err := tx.QueryRow(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version) VALUES ($1, $2, $3) RETURNING id`,
		jobID, action, version).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("queue %s task: %w", action, err)
	}
	return id, taskQueued(ctx, tx)
}

// IdempotencyKey names a create request so a retry returns the first job.
// Hash identifies the request's content: the same key with another hash is
// refused.
type IdempotencyKey struct {
	Key  string
	Hash []byte
}

// idempotencyTTL is how long a create's Idempotency-Key is remembered.
const idempotencyTTL = 24 * time.Hour

// CreateJob stores a job for a tenant and queues its provisioning. The
// webroot must belong to the tenant. With an idempotency key it first
// claims the key: if the tenant used it within 24 hours, it returns that
// job (replayed) instead, or ErrIdempotencyKeyReused for another request.
func (s *Store) CreateJob(ctx context.Context, tenantID string, f JobFields, idem *IdempotencyKey) (job CronJob, replayed bool, err error) {
	ctx, woke := s.wakeAfterCommit(ctx)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if idem != nil {
			var claimed bool
			if job, claimed, err = claimIdempotencyKey(ctx, tx, tenantID, *idem); err != nil || !claimed {
				replayed = err == nil
				return err
			}
		}
		if err := s.checkJobQuota(ctx, tx, tenantID); err != nil {
			return err
		}
		job, err = scanJob(tx.QueryRow(ctx, `
			INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, timezone, command, working_directory, enabled,
			                       timeout_seconds, max_memory_mb, max_failures, name, environment, catchup_window_seconds,
			                       overlap_policy, retries, retry_delay_seconds)
			SELECT w.tenant_id, w.id, @schedule, @timezone, @command, @working_directory, @enabled,
			       @timeout_seconds, @max_memory_mb, @max_failures, @name, @environment, @catchup_window_seconds,
			       @overlap_policy, @retries, @retry_delay_seconds
			FROM webroots w WHERE w.id = @webroot_id AND w.tenant_id = @tenant_id
			RETURNING `+jobColumns, fieldArgs(f, pgx.NamedArgs{"tenant_id": tenantID})))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("create cron job: %w", ErrUnknownWebroot)
		}
		if err != nil {
			return fmt.Errorf("create cron job: %w", err)
		}
		if idem != nil {
			if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET cron_job_id = $3 WHERE tenant_id = $1 AND key = $2`,
				tenantID, idem.Key, job.ID); err != nil {
				return fmt.Errorf("create cron job: idempotency key: %w", err)
			}
		}
		// enabled in the detail: the slots listing reads when the job ran
		// from the trail, and an update's detail names fields, not values.
		created := map[string]any{"enabled": job.Enabled}
		if err := recordEvent(ctx, tx, job, actorOf(ctx), string(wire.ActionCreate), created); err != nil {
			return err
		}
		return queueTask(ctx, tx, job.ID, wire.ActionCreate, job.Version)
	})
	woke(err)
	return job, replayed, err
}

// claimIdempotencyKey claims a tenant's key for a new job (claimed), or
// returns the job an earlier request with that key created. A concurrent
// request with the same key waits on the key's row until the first
// commits, then finds its job.
// IdempotentReplay returns the job an earlier create with this key and
// request made (ok false if there is none within the key's lifetime). The
// API asks it before refusing a create over a quota: a retry of a create
// that succeeded answers with its job, whatever the limits are now.
func (s *Store) IdempotentReplay(ctx context.Context, tenantID string, k IdempotencyKey) (CronJob, bool, error) {
	var jobID string
	err := s.pool.QueryRow(ctx, `SELECT cron_job_id FROM idempotency_keys
		WHERE tenant_id = $1 AND key = $2 AND request_hash = $3 AND cron_job_id IS NOT NULL
		  AND created_at >= now() - $4::interval`, tenantID, k.Key, k.Hash, idempotencyTTL).Scan(&jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return CronJob{}, false, nil
	}
	if err != nil {
		return CronJob{}, false, fmt.Errorf("idempotency replay: %w", err)
	}
	job, err := s.GetJob(ctx, jobID)
	if errors.Is(err, ErrNotFound) {
		return CronJob{}, false, nil
	}
	return job, err == nil, err
}

func claimIdempotencyKey(ctx context.Context, tx pgx.Tx, tenantID string, k IdempotencyKey) (CronJob, bool, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND created_at < now() - $2::interval`,
		tenantID, idempotencyTTL); err != nil {
		return CronJob{}, false, fmt.Errorf("idempotency key: expire: %w", err)
	}
	tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, tenantID, k.Key, k.Hash)
	if err != nil {
		return CronJob{}, false, fmt.Errorf("idempotency key: claim: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return CronJob{}, true, nil
	}
	var hash []byte
	var jobID *string
	if err := tx.QueryRow(ctx, `SELECT request_hash, cron_job_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		tenantID, k.Key).Scan(&hash, &jobID); err != nil {
		return CronJob{}, false, fmt.Errorf("idempotency key: read: %w", err)
	}
	if string(hash) != string(k.Hash) || jobID == nil {
		return CronJob{}, false, ErrIdempotencyKeyReused
	}
	job, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1`, *jobID))
	return job, false, notFound(err, "idempotency key: first job")
}

// ExpireIdempotencyKeys forgets create keys older than 24 hours, also
// those of tenants that stopped creating jobs (a create expires its own
// tenant's keys first).
func (s *Store) ExpireIdempotencyKeys(ctx context.Context) (int64, error) {
	return Chores{s.pool}.ExpireIdempotencyKeys(ctx)
}

// ExpireIdempotencyKeys is Store.ExpireIdempotencyKeys on the chores'
// connection.
func (c Chores) ExpireIdempotencyKeys(ctx context.Context) (int64, error) {
	tag, err := c.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < now() - $1::interval`, idempotencyTTL)
	if err != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", err)
	}
	return tag.RowsAffected(), nil
}

// fieldArgs binds the tenant-settable fields by name, plus extra.
func fieldArgs(f JobFields, extra pgx.NamedArgs) pgx.NamedArgs {
	args := pgx.NamedArgs{
		"webroot_id": f.WebrootID, "schedule": f.Schedule, "timezone": f.Timezone, "command": f.Command,
		"working_directory": f.WorkingDirectory, "enabled": f.Enabled, "timeout_seconds": f.TimeoutSeconds,
		"max_memory_mb": f.MaxMemoryMB, "max_failures": f.MaxFailures, "name": f.Name,
		"environment": envOrEmpty(f.Environment), "catchup_window_seconds": f.CatchUpWindowSeconds,
		"overlap_policy": string(f.OverlapPolicy.OrSkip()),
		"retries":        f.Retries, "retry_delay_seconds": retryDelayOrDefault(f.RetryDelaySeconds),
	}
	for k, v := range extra {
		args[k] = v
	}
	return args
}

// GetJob returns a job, whatever its tenant; callers check the scope.
func (s *Store) GetJob(ctx context.Context, id string) (CronJob, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1`, id))
	return j, notFound(err, "get cron job")
}

// JobPos is a position in a tenant's job listing, which is ordered by
// (created_at, id), oldest first.
type JobPos struct {
	CreatedAt time.Time
	ID        string
}

// JobQuery selects a page of a tenant's jobs.
type JobQuery struct {
	Statuses []wire.Status // none: any
	After    *JobPos       // nil: from the first
	Limit    int           // at least 1
}

// ListJobs lists a page of a tenant's jobs, oldest first, and the
// position after which the next page starts (nil: this was the last).
func (s *Store) ListJobs(ctx context.Context, tenantID string, q JobQuery) ([]CronJob, *JobPos, error) {
	var after *time.Time
	var afterID string
	if q.After != nil {
		after, afterID = &q.After.CreatedAt, q.After.ID
	}
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM cron_jobs
		WHERE tenant_id = $1 AND (coalesce(cardinality($2::text[]), 0) = 0 OR status = ANY($2))
		  AND ($3::timestamptz IS NULL OR (created_at, id) > ($3, $4::uuid))
		ORDER BY created_at, id LIMIT $5`, tenantID, q.Statuses, after, nilIfEmpty(afterID), q.Limit+1)
	if err != nil {
		return nil, nil, fmt.Errorf("list cron jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CronJob, error) { return scanJob(r) })
	if err != nil {
		return nil, nil, fmt.Errorf("list cron jobs: %w", err)
	}
	jobs, more := page(jobs, q.Limit)
	if !more {
		return jobs, nil, nil
	}
	last := jobs[len(jobs)-1]
	return jobs, &JobPos{CreatedAt: last.CreatedAt, ID: last.ID}, nil
}

// page cuts rows, read with one row more than limit, to limit, and says
// whether there were more.
func page[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// change is what a transition's decide asks for: the task to queue ("" =
// store nothing) and whether the failure counter starts afresh.
type change struct {
	action        wire.Action
	resetFailures bool
	// disabledReason is a disable's reason ("": none given)
	disabledReason string
}

// disabledReasonAfter is the disable reason a job keeps after a change:
// none once it is enabled (whichever change enabled it: enable, retry of
// an auto-disabled job, an update setting enabled); else the reason the
// change gave; else, if it was disabled already, the one it had (a second
// disable without a reason keeps the first one's). A job that was enabled
// before has no reason to keep: a reason left in the column by an older
// replica's enable must not come back with the next disable.
func disabledReasonAfter(wasEnabled, enabled bool, had, given string) string {
	switch {
	case enabled:
		return ""
	case given != "":
		return given
	case wasEnabled:
		return ""
	}
	return had
}

// transition locks a job, lets decide check and change it, and stores the
// result with a bumped version and a queued task, all in one transaction.
// ifVersion (0 = any) is the version the caller saw (If-Match): another
// one fails with ErrPreconditionFailed. Because decide works on the row
// read FOR UPDATE, a change can never write back fields it read earlier.
func (s *Store) transition(ctx context.Context, id string, ifVersion int64,
	decide func(tx pgx.Tx, j *CronJob) (change, error)) (CronJob, error) {
	var job CronJob
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return notFound(err, "cron job")
		}
		if ifVersion != 0 && job.Version != ifVersion {
			return fmt.Errorf("cron job is at version %d, not %d: %w", job.Version, ifVersion, ErrPreconditionFailed)
		}
		before := job
		ch, err := decide(tx, &job)
		if err != nil || ch.action == "" {
			return err
		}
		job.DisabledReason = disabledReasonAfter(before.Enabled, job.Enabled, job.DisabledReason, ch.disabledReason)
		// The job's highest run id is read through its own runs (OFFSET 0
		// keeps PostgreSQL from turning max(id) into a backward walk of
		// the primary key, filtered by job: at 10 million runs that walked
		// 450,000 other runs, 840 ms, for a job that had not run lately;
		// the job's index entries took 36 ms: docs/benchmarks.md).
		job, err = scanJob(tx.QueryRow(ctx, `
			UPDATE cron_jobs SET webroot_id = @webroot_id, schedule = @schedule, timezone = @timezone,
			       command = @command, working_directory = @working_directory, enabled = @enabled,
			       timeout_seconds = @timeout_seconds, max_memory_mb = @max_memory_mb, max_failures = @max_failures,
			       consecutive_failures = @consecutive_failures, status = @status, status_message = @status_message,
			       name = @name, disabled_reason = @disabled_reason, environment = @environment,
			       catchup_window_seconds = @catchup_window_seconds, overlap_policy = @overlap_policy,
			       retries = @retries, retry_delay_seconds = @retry_delay_seconds,
			       not_before = CASE WHEN @rearm THEN now() ELSE not_before END,
			       swept_until = CASE WHEN @rearm THEN NULL ELSE swept_until END,
			       failures_after_run = CASE WHEN @reset_failures
			           THEN (SELECT coalesce(max(r.id), 0) FROM (SELECT id FROM cron_job_runs WHERE cron_job_id = @id OFFSET 0) r)
			           ELSE failures_after_run END,
			       failures_from = CASE WHEN @reset_failures AND @rearm THEN now() ELSE failures_from END,
			       failures_after_request = CASE WHEN @reset_failures AND @rearm
			           THEN (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM cron_job_tasks_id_seq)
			           ELSE failures_after_request END,
			       version = version + 1, updated_at = now()
			WHERE id = @id RETURNING `+jobColumns, fieldArgs(job.JobFields, pgx.NamedArgs{
			"id": id, "consecutive_failures": job.ConsecutiveFailures, "status": job.Status,
			"status_message": job.StatusMessage, "rearm": rearms(before, job), "reset_failures": ch.resetFailures,
			"disabled_reason": job.DisabledReason,
		})))
		if err != nil {
			return fmt.Errorf("update cron job: %w", err)
		}
		var detail map[string]any
		if ch.action == wire.ActionUpdate {
			detail = map[string]any{"fields": changedFields(before.JobFields, job.JobFields)}
		}
		if err := recordEvent(ctx, tx, job, actorOf(ctx), string(ch.action), detail); err != nil {
			return err
		}
		return queueTask(ctx, tx, id, ch.action, job.Version)
	})
	woke(err)
	return job, err
}

func notDeleting(j *CronJob) error {
	if j.Status == wire.StatusDeleting {
		return conflict("cron job is being deleted")
	}
	return nil
}

// UpdateJob changes the tenant-settable fields: merge gets them as the
// row locked inside the transaction holds them and returns the new ones
// (the API overlays the request's present fields and validates), so a
// concurrent change (a disable) is never undone by a stale copy. The
// webroot must belong to the job's tenant. An auto-disabled job stays
// disabled until enabled.
func (s *Store) UpdateJob(ctx context.Context, id string, ifVersion int64, merge func(JobFields) (JobFields, error)) (CronJob, error) {
	return s.transition(ctx, id, ifVersion, func(tx pgx.Tx, j *CronJob) (change, error) {
		if err := notDeleting(j); err != nil {
			return change{}, err
		}
		f, err := merge(j.JobFields)
		if err != nil {
			return change{}, err
		}
		if f.WebrootID != j.WebrootID {
			if err := checkWebroot(ctx, tx, j.TenantID, f.WebrootID); err != nil {
				return change{}, err
			}
		}
		if j.Status == wire.StatusAutoDisabled {
			f.Enabled = false // only enable and retry lift an auto-disable
		} else {
			j.Status, j.StatusMessage = wire.StatusPending, ""
		}
		j.JobFields = f
		return change{action: wire.ActionUpdate}, nil
	})
}

// checkWebroot fails with ErrUnknownWebroot unless the webroot is the
// tenant's.
func checkWebroot(ctx context.Context, tx pgx.Tx, tenantID, webrootID string) error {
	var owner string
	err := tx.QueryRow(ctx, `SELECT tenant_id FROM webroots WHERE id = $1`, webrootID).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || (err == nil && owner != tenantID):
		return fmt.Errorf("update cron job: %w", ErrUnknownWebroot)
	case err != nil:
		return fmt.Errorf("update cron job: webroot: %w", err)
	}
	return nil
}

// DeleteJob marks a job for deletion; the delete workflow removes its units
// and then the row. Deleting twice is not an error.
func (s *Store) DeleteJob(ctx context.Context, id string, ifVersion int64) (CronJob, error) {
	return s.transition(ctx, id, ifVersion, func(_ pgx.Tx, j *CronJob) (change, error) {
		if j.Status == wire.StatusDeleting {
			return change{}, nil
		}
		j.Status, j.StatusMessage, j.Enabled = wire.StatusDeleting, "", false
		return change{action: wire.ActionDelete}, nil
	})
}

// EnableJob enables a job; it lifts an auto-disable and starts the failure
// counter afresh (runs recorded so far no longer count).
func (s *Store) EnableJob(ctx context.Context, id string, ifVersion int64) (CronJob, error) {
	return s.transition(ctx, id, ifVersion, func(_ pgx.Tx, j *CronJob) (change, error) {
		if err := notDeleting(j); err != nil {
			return change{}, err
		}
		j.Enabled, j.ConsecutiveFailures, j.Status, j.StatusMessage = true, 0, wire.StatusPending, ""
		return change{action: wire.ActionEnable, resetFailures: true}, nil
	})
}

// DisableJob disables a job on all nodes.
func (s *Store) DisableJob(ctx context.Context, id string, ifVersion int64) (CronJob, error) {
	return s.DisableJobFor(ctx, id, ifVersion, "")
}

// DisableJobFor disables a job on all nodes, keeping reason (the API
// validates it; "": none given, an earlier one stays) on the job until it
// is enabled again.
func (s *Store) DisableJobFor(ctx context.Context, id string, ifVersion int64, reason string) (CronJob, error) {
	return s.transition(ctx, id, ifVersion, func(_ pgx.Tx, j *CronJob) (change, error) {
		if err := notDeleting(j); err != nil {
			return change{}, err
		}
		j.Enabled, j.Status, j.StatusMessage = false, wire.StatusPending, ""
		return change{action: wire.ActionDisable, disabledReason: reason}, nil
	})
}

// RetryJob re-runs provisioning of a failed, pending or auto-disabled job;
// an auto-disabled job is enabled again with its counter started afresh.
func (s *Store) RetryJob(ctx context.Context, id string, ifVersion int64) (CronJob, error) {
	return s.transition(ctx, id, ifVersion, func(_ pgx.Tx, j *CronJob) (change, error) {
		switch j.Status {
		case wire.StatusFailed, wire.StatusPending:
		case wire.StatusAutoDisabled:
			j.Enabled = true
		default:
			return change{}, conflict("only a failed, pending or auto_disabled cron job can be retried; this one is %s", j.Status)
		}
		j.ConsecutiveFailures, j.Status, j.StatusMessage = 0, wire.StatusPending, ""
		return change{action: wire.ActionRetry, resetFailures: true}, nil
	})
}

// RunNow queues one run outside the schedule and returns its request id
// (the outbox task id; the run's key is runkey.Manual(job, request)). The
// job keeps its version: the run is keyed by the request.
func (s *Store) RunNow(ctx context.Context, id string, ifVersion int64) (CronJob, string, error) {
	pre, err := peekRunnableJob(ctx, s.pool, id, ifVersion)
	if err != nil {
		return pre, "", err
	}
	refund, err := s.takeRunNow(ctx, pre.TenantID)
	if err != nil {
		return pre, "", err
	}
	var job CronJob
	var request int64
	ctx, woke := s.wakeAfterCommit(ctx)
	err = s.inTokenTx(ctx, refund, func(tx pgx.Tx) error {
		var err error
		if job, err = runnableJob(ctx, tx, id, ifVersion); err != nil {
			return err
		}
		if request, err = queueTaskID(ctx, tx, id, wire.ActionRunNow, job.Version); err != nil {
			return err
		}
		// The event names the request: it outlives the outbox row (pruned
		// an hour after dispatch), so a long run-now can still be
		// cancelled (CancelRun).
		return recordEvent(ctx, tx, job, actorOf(ctx), string(wire.ActionRunNow), map[string]any{"request": strconv.FormatInt(request, 10)})
	})
	woke(err)
	if err != nil {
		return job, "", err
	}
	return job, strconv.FormatInt(request, 10), nil
}

// peekRunnableJob is runnableJob without the lock: what a run-now or
// backfill checks before it takes its tenant's token (takeRunNow), so
// that a request the job could never take answers 404, 412 or 409 rather
// than 429 and takes no token.
func peekRunnableJob(ctx context.Context, q dbtx, id string, ifVersion int64) (CronJob, error) {
	job, err := scanJob(q.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1`, id))
	if err != nil {
		return job, notFound(err, "cron job")
	}
	return job, checkRunnable(job, ifVersion)
}

// runnableJob reads a job a run-now or backfill may run, holding it (FOR
// SHARE) against a change until the request is queued: it must be at
// ifVersion (0: any) and provisioned (active or disabled).
func runnableJob(ctx context.Context, tx pgx.Tx, id string, ifVersion int64) (CronJob, error) {
	job, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 FOR SHARE`, id))
	if err != nil {
		return job, notFound(err, "cron job")
	}
	return job, checkRunnable(job, ifVersion)
}

// checkRunnable is runnableJob's verdict on the job it read.
func checkRunnable(job CronJob, ifVersion int64) error {
	if ifVersion != 0 && job.Version != ifVersion {
		return fmt.Errorf("cron job is at version %d, not %d: %w", job.Version, ifVersion, ErrPreconditionFailed)
	}
	if job.Status != wire.StatusActive && job.Status != wire.StatusDisabled {
		return conflict("cron job is %s; it can run now once it is provisioned (active or disabled)", job.Status)
	}
	return nil
}

// RunNowRequested returns when a job's run-now, backfill or retry request
// was made (a retry's: when its failed attempt was recorded); false when the job has no such request (never made, or its outbox
// row was pruned, an hour after dispatch). The task must be of the key's
// kind: a run-now's has no run key, a backfill's the very key (the slot
// included).
func (s *Store) RunNowRequested(ctx context.Context, jobID string, key runkey.Key) (time.Time, bool, error) {
	n := requestID(key) // 0 for a retry: its task is found by its key alone
	if n < 1 && key.Trigger != wire.TriggerRetry {
		return time.Time{}, false, nil
	}
	taskKey := ""
	if key.Trigger != wire.TriggerManual {
		taskKey = key.String()
	}
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT created_at FROM cron_job_tasks
		WHERE ($1 = 0 OR id = $1) AND cron_job_id = $2 AND action = $3 AND run_key = $4`,
		n, jobID, wire.ActionRunNow, taskKey).Scan(&at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("run-now request: %w", err)
	}
	return at, true, nil
}

// SetProvisioned records the workflow's verdict for a version of a job:
// status, a message, and took, how many of the shard's nodes have this
// version. It changes nothing if the job has moved on (another version) or
// left pending, so a slow workflow cannot overwrite a newer state such as
// auto_disabled. The verdict stored is provisionedVerdict's (a job no node
// took is never active) and where the lost-run sweep stands afterwards is
// sweepAfterProvisioning's decision.
func (s *Store) SetProvisioned(ctx context.Context, id string, version int64, status wire.Status, message string, took int) (bool, error) {
	set := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var swept *time.Time
		var now time.Time
		var nodes int
		err := tx.QueryRow(ctx, `SELECT j.swept_until, now(),
			       (SELECT count(*) FROM nodes n WHERE n.shard_id = t.shard_id AND NOT n.draining)
			FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id
			WHERE j.id = $1 AND j.version = $2 AND j.status = $3 FOR UPDATE OF j`,
			id, version, wire.StatusPending).Scan(&swept, &now, &nodes)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // moved on, or gone
		}
		if err != nil {
			return fmt.Errorf("set provisioned: %w", err)
		}
		status, message, took = provisionedVerdict(status, message, took, nodes)
		job, err := scanJob(tx.QueryRow(ctx, `UPDATE cron_jobs SET status = $2, status_message = $3, updated_at = now(), swept_until = $4
			WHERE id = $1 RETURNING `+jobColumns, id, status, message, sweepAfterProvisioning(swept, status, took, now)))
		if err != nil {
			return fmt.Errorf("set provisioned: %w", err)
		}
		detail := map[string]any{"status": status, "nodes": took}
		if message != "" {
			detail["message"] = message
		}
		if err := recordEvent(ctx, tx, job, ActorSystem, "provisioned", detail); err != nil {
			return err
		}
		set = true
		return nil
	})
	return set, err
}

// NoNodeMessage is the status message of a job that is enabled but on no
// node because its shard has none (or only draining ones).
const NoNodeMessage = wire.NotProvisionedPrefix + "any node: the shard has no node that is not draining; " +
	"it is provisioned again when a node announces itself"

// provisionedVerdict is the verdict stored for a provisioning the workflow
// reported as status with took nodes having the version; nodes is how many
// of the shard's nodes are not draining now. An active job is one that
// runs, so a job no node took is never active:
//   - active with took 0 and no node: the shard has none, nothing runs it;
//     it is failed (NoNodeMessage), which a node's announce re-queues
//     (requeueFailed) and a retry accepts;
//   - active with took 0 on a shard that has nodes: a workflow worker from
//     before SetJobStatus had took (it decodes as 0); active meant every
//     node took it, so took is the node count;
//   - anything else stands as reported.
func provisionedVerdict(status wire.Status, message string, took, nodes int) (wire.Status, string, int) {
	if status != wire.StatusActive || took > 0 {
		return status, message, took
	}
	if nodes == 0 {
		return wire.StatusFailed, NoNodeMessage, 0
	}
	return status, message, nodes
}

// sweepAfterProvisioning decides where the lost-run sweep of a job stands
// after a provisioning verdict (swept is where it stood: nil when no node
// has had the job's current schedule since its create, enable or schedule
// change). No slot is counted before a node had it:
//   - once a node has the job (took > 0) and it runs (active, or failed:
//     the nodes that took it run it), a sweep that had not started starts
//     now; slots before (a change waiting out a Temporal outage, a
//     provisioning that waited for nodes) were never the nodes';
//   - a sweep that had started goes on where it was: after a change that
//     keeps the schedule (a command edit, a retry) the nodes ran these
//     slots all along, even if none took the new version;
//   - if no node took it (every node failed, or the shard has none), a
//     sweep that had not started stays off: nothing runs the schedule
//     (until a node reports a run of it: sweepAfterOutcome).
func sweepAfterProvisioning(swept *time.Time, status wire.Status, took int, now time.Time) *time.Time {
	runs := status == wire.StatusActive || status == wire.StatusFailed
	if swept != nil || took <= 0 || !runs {
		return swept
	}
	return &now
}

// retryDelayOrDefault is the delay as stored: a caller that does not set
// it (0; the API always does) gets the default, as the column would.
func retryDelayOrDefault(sec int) int {
	if sec == 0 {
		return wire.DefaultRetryDelaySec
	}
	return sec
}

// envOrEmpty is the environment as the NOT NULL column stores it: {} for
// none (a nil map would encode as JSON null).
func envOrEmpty(env map[string]string) map[string]string {
	if env == nil {
		return map[string]string{}
	}
	return env
}

// CancelRun queues a stop of one run of a job, named by its run key, on
// whichever node of the shard runs it (the nodes look; the one running it
// stops it and reports it cancelled). A run with a record has ended and
// cannot be cancelled (a conflict), except one the sweeper recorded lost,
// which may still run. A scheduled slot still in the future has nothing
// to stop. A manual key must be a run-now request of the job. The stop is
// best effort by nature: a run that ends on its own first keeps its own
// result.
func (s *Store) CancelRun(ctx context.Context, jobID, runKey string) (CronJob, error) {
	key, err := runkey.Parse(runKey)
	if err != nil || key.JobID != jobID {
		return CronJob{}, fmt.Errorf("run %q of cron job %s: %w", runKey, jobID, ErrNotFound)
	}
	var job CronJob
	ctx, woke := s.wakeAfterCommit(ctx)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		job, err = scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM cron_jobs WHERE id = $1 FOR SHARE`, jobID))
		if err != nil {
			return notFound(err, "cron job")
		}
		var result *string
		var now time.Time
		var requested bool
		var pending int
		// The run's record, and a retry's failed attempt (of the same
		// slot), are looked up in the key's slot when it names one
		// (runKeyWhere: one month's index).
		recorded, keyArgs := runKeyWhere("", runKey, 7)
		queuedBy := "cron_job_id = $3 AND retry_key = $1"
		if !key.Slot.IsZero() {
			queuedBy += " AND scheduled_at = $" + strconv.Itoa(6+len(keyArgs)) // the key's slot, runKeyWhere's last
		}
		err = tx.QueryRow(ctx, `SELECT (SELECT result FROM cron_job_runs WHERE `+recorded+`), now(),
			       EXISTS (SELECT 1 FROM cron_job_tasks WHERE id = $2 AND cron_job_id = $3 AND action = $4)
			       OR EXISTS (SELECT 1 FROM cron_job_events WHERE cron_job_id = $3 AND action = $4 AND detail->>'request' = $5)
			       OR EXISTS (SELECT 1 FROM cron_job_runs WHERE `+queuedBy+`),
			       (SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $3 AND action = $6 AND dispatched_at IS NULL)`,
			append([]any{runKey, requestID(key), jobID, wire.ActionRunNow, key.Request, wire.ActionCancel}, keyArgs...)...).
			Scan(&result, &now, &requested, &pending)
		if err != nil {
			return fmt.Errorf("cancel run: %w", err)
		}
		// Each cancel asks every node of the shard: a tenant must not
		// flood the shard's node queues, which other tenants share.
		if pending >= MaxPendingCancels {
			return conflict("%d cancels of this job are still on their way to the nodes: wait for them", pending)
		}
		// A catch-up may start up to the catch-up window after its slot.
		if err := cancellable(key, result, requested, now, job.TimeoutSeconds+job.CatchUpWindowSeconds); err != nil {
			return err
		}
		if err := recordEvent(ctx, tx, job, actorOf(ctx), string(wire.ActionCancel), map[string]any{"run_key": runKey}); err != nil {
			return err
		}
		if dropped, err := dropQueuedRetry(ctx, tx, jobID, key); err != nil || dropped {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version, run_key) VALUES ($1, $2, $3, $4)`,
			jobID, wire.ActionCancel, job.Version, runKey)
		if err != nil {
			return fmt.Errorf("queue cancel task: %w", err)
		}
		return taskQueued(ctx, tx)
	})
	woke(err)
	return job, err
}

// dropQueuedRetry cancels a retry still waiting out its delay: its task,
// not yet sent, is deleted, so it never runs (a cancel task would go out
// ahead of the delayed retry and find nothing to stop). The failed
// attempt it was to follow is then the slot's last attempt and counts
// again (from the job's next recorded outcome, as for a dropped retry).
// A retry already sent is cancelled on the nodes like any run.
func dropQueuedRetry(ctx context.Context, tx pgx.Tx, jobID string, key runkey.Key) (bool, error) {
	if key.Trigger != wire.TriggerRetry {
		return false, nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM cron_job_tasks
		WHERE cron_job_id = $1 AND action = $2 AND run_key = $3 AND dispatched_at IS NULL`, jobID, wire.ActionRunNow, key.String())
	if err != nil || tag.RowsAffected() == 0 {
		return false, wrap(err, "cancel a queued retry")
	}
	_, err = tx.Exec(ctx, `UPDATE cron_job_runs SET superseded = false, retry_due_at = NULL WHERE `+followedBy(1),
		key.JobID, key.Slot, key.String())
	return true, wrap(err, "cancel a queued retry: count the attempt before")
}

// requestID is a manual key's request as the outbox task id it is; 0
// (no task) for anything else, and for a spelling the core never gives
// ("012" is not request 12's key: the run would be recorded under "12").
func requestID(k runkey.Key) int64 {
	if k.Trigger != wire.TriggerManual && k.Trigger != wire.TriggerBackfill {
		return 0
	}
	n, err := strconv.ParseInt(k.Request, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != k.Request {
		return 0
	}
	return n
}

// MaxPendingCancels bounds a job's cancels not yet handed to its workflow.
const MaxPendingCancels = 10

// cancelReach is how long after its slot a scheduled run may still be
// running beyond its timeout: systemd stops it at the timeout (10 s to
// die), and a node clock may lag a little.
const cancelReach = 15 * time.Minute

// cancellable decides whether a run can still be stopped: it has no record
// (or only the sweeper's lost one: a node may still be running it), a
// scheduled slot is neither in the future nor so old that its timeout
// has stopped it (cancelReach), and a manual run is a request of the job
// (by its outbox row or, once that is pruned, its audit event);
// timeoutSec is how long after its slot a run may still run (the
// timeout, plus the catch-up window for a job that catches up). A slot
// need not be a fire time of today's schedule: a run of the schedule
// before an edit may still be running.
func cancellable(k runkey.Key, recorded *string, requested bool, now time.Time, timeoutSec int) error {
	switch {
	case recorded != nil && wire.Result(*recorded) != wire.ResultLost:
		return conflict("run %s has ended (%s): only a run that is queued or running can be cancelled", k, *recorded)
	case k.Trigger == wire.TriggerScheduled && k.Slot.After(now):
		return conflict("slot %s is in the future: nothing runs yet", k.Slot.Format(time.RFC3339))
	case k.Trigger == wire.TriggerScheduled && now.Sub(k.Slot) > time.Duration(timeoutSec)*time.Second+cancelReach:
		return conflict("slot %s is older than the job's timeout: its run has ended", k.Slot.Format(time.RFC3339))
	case k.ByRequest() && (!requested || (k.Trigger != wire.TriggerRetry && requestID(k) == 0)):
		return fmt.Errorf("run-now request %s: %w", k.Request, ErrNotFound)
	}
	return nil
}
