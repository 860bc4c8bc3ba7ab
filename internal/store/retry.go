package store

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// Retries (docs/semantics.md "Retries"). When the core records a failed
// attempt of a scheduled slot that has attempts left, it queues the next
// attempt in the same transaction: a run-now task (its run key
// runkey.Retry(job, slot, attempt)) that the dispatcher sends no earlier
// than its not_before, to every node of the shard like a run-now, where
// the lock and the request's id (the same on every node) elect one runner.
// The key is the attempt's alone, and unique among run-now tasks, so a
// duplicate outcome, a second core replica or a redelivered task never
// makes two runs of one attempt.

// retryDelay is how long after failed attempt n (1: the scheduled run) the
// next attempt waits: delaySec, doubled for each attempt after the first,
// at most wire.MaxRetryBackoffSec.
func retryDelay(delaySec, failedAttempt int) time.Duration {
	d := time.Duration(delaySec) * time.Second
	limit := time.Duration(wire.MaxRetryBackoffSec) * time.Second
	for i := 1; i < failedAttempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// retryInput is what decideRetry decides on.
type retryInput struct {
	Key        runkey.Key  // the attempt recorded
	Result     wire.Result // its result
	Version    int64       // the job version the attempt ran
	Job        CronJob     // the job now (its row locked by the recording transaction)
	Now        time.Time   // the core's clock
	NextSlot   time.Time   // the job's next fire time after the attempt's slot (zero: none)
	Duplicate  bool        // the outcome changed nothing (a redelivery)
	Superseded bool        // the attempt's record already has a retry queued
	// Interrupted: a platform_error from the node the attempt ran on,
	// whose shutdown stopped it (stoppedOnItsNode): retried like a failure.
	Interrupted bool
}

// retryPlan is a retry to queue: its key, attempt and when it may start.
type retryPlan struct {
	Key     string
	Attempt int
	Due     time.Time
}

// decideRetry decides whether a recorded attempt is retried. Only a
// tenant failure of a scheduled slot (on time or caught up) or of a retry
// is (or an attempt the platform stopped on the node it ran on: it did not
// finish, through no fault of the tenant's), while the job is enabled and still at the version the attempt ran
// (a disable, delete or any change since makes no further attempt), and
// attempts are left (1 + retries in all). The retry must start before the
// slot's next fire time and within wire.MaxRetryStart of the slot: one that would not (a long backoff, an outcome
// that arrives late after an outage) is not made, and the failure stands
// as the slot's last attempt. why says why not, for the log.
func decideRetry(in retryInput) (plan retryPlan, ok bool, why string) {
	attempt := in.Key.AttemptNumber()
	due := in.Now.Add(retryDelay(in.Job.RetryDelaySeconds, attempt))
	switch {
	case in.Duplicate || in.Superseded:
		return plan, false, "the attempt's retry is decided already"
	case in.Key.Trigger != wire.TriggerScheduled && in.Key.Trigger != wire.TriggerRetry:
		return plan, false, "only a scheduled slot is retried"
	case !in.Result.IsFailure() && !(in.Interrupted && in.Result == wire.ResultPlatformError):
		return plan, false, "not a tenant failure"
	case in.Job.Retries == 0 || attempt > in.Job.Retries:
		return plan, false, fmt.Sprintf("attempt %d of %d", attempt, 1+in.Job.Retries)
	case !in.Job.Enabled || in.Version != in.Job.Version:
		return plan, false, "the job was disabled or changed since the attempt"
	case in.NextSlot.IsZero() || !due.Before(in.NextSlot):
		return plan, false, fmt.Sprintf("the retry would start at %s, not before the next slot", due.UTC().Format(time.RFC3339))
	case due.Sub(in.Key.Slot) > wire.MaxRetryStart:
		return plan, false, fmt.Sprintf("the retry would start at %s, more than %s after its slot", due.UTC().Format(time.RFC3339), wire.MaxRetryStart)
	}
	return retryPlan{Key: runkey.Retry(in.Key.JobID, in.Key.Slot, attempt+1), Attempt: attempt + 1, Due: due}, true, ""
}

// followedBy is the condition (its arguments from $first: the job, the
// slot and the retry's key) that a run record is an attempt a retry
// follows: the one that queued it (queueRetry marks it with the retry's
// key), and the failed attempts before an interrupted retry, which that
// retry handed on to the retry it queued (handOn). A retry's real result
// settles them all; a dropped or cancelled retry makes them count again.
// The job and slot name few records (cron_job_runs_page).
func followedBy(first int) string {
	n := func(i int) string { return "$" + strconv.Itoa(first+i) }
	return "cron_job_id = " + n(0) + " AND scheduled_at = " + n(1) + " AND retry_key = " + n(2)
}

// retryAfterRecord is the one call of outcome recording (RecordOutcome,
// after the run is written, before the recount): a retry's real result
// supersedes the attempt before it (that attempt counts no more), and a
// failed attempt with attempts left queues the next one (decideRetry) and
// is superseded by it. runID is the attempt's record and at its slot
// (scheduled_at: with the id, its primary key, one month's index). It
// returns the key of the retry it queued ("" none), and whether o is a
// retry's counted result that settled an attempt the core had queued it
// for (followedBy found one): a retry key with no such attempt (no retry
// was ever queued for it) settles nothing.
func retryAfterRecord(ctx context.Context, tx pgx.Tx, job CronJob, o Outcome, at time.Time, runID int64, interrupted bool) (retry string, settled bool, err error) {
	key, err := runkey.Parse(o.RunKey)
	if err != nil {
		return "", false, nil // the API refuses such keys; nothing to retry
	}
	if key.Trigger == wire.TriggerRetry && !IsPlaceholder(o.Result) {
		// A counted result (a success, the tenant's failure) is the slot's
		// last attempt now: the one before counts no more. A cancelled
		// retry counts neither way, so the failure before it is the slot's
		// last counted attempt again (else a job whose retries are
		// cancelled, by the tenant or by cancel_previous at the next slot,
		// would never count a failure).
		// The attempts it follows are of the same slot: their records sit
		// there (followedBy).
		tag, err := tx.Exec(ctx, `UPDATE cron_job_runs SET superseded = $1, retry_due_at = NULL WHERE `+followedBy(2),
			counted(o.Result), key.JobID, key.Slot, key.String())
		if err != nil {
			return "", false, fmt.Errorf("retry: supersede the attempt before: %w", err)
		}
		settled = tag.RowsAffected() > 0
	}
	in := retryInput{Key: key, Result: o.Result, Version: o.Version, Job: job, Interrupted: interrupted}
	if err := tx.QueryRow(ctx, `SELECT now(), superseded FROM cron_job_runs WHERE id = $1 AND scheduled_at = $2`, runID, at).Scan(&in.Now, &in.Superseded); err != nil {
		return "", false, fmt.Errorf("retry: %w", err)
	}
	if sched, err := schedule.Parse(job.Schedule, job.Timezone); err == nil {
		in.NextSlot = sched.Next(key.Slot)
	}
	plan, ok, why := decideRetry(in)
	if !ok {
		if in.Result.IsFailure() && job.Retries > 0 && key.Trigger != wire.TriggerManual && key.Trigger != wire.TriggerBackfill {
			slog.Info("failed attempt not retried", "cron_job_id", job.ID, "run_key", o.RunKey, "why", why)
		}
		return "", settled, nil
	}
	if err := queueRetry(ctx, tx, job, at, runID, plan); err != nil {
		return "", false, err
	}
	if key.Trigger == wire.TriggerRetry && IsPlaceholder(o.Result) {
		return plan.Key, settled, handOn(ctx, tx, key, plan)
	}
	return plan.Key, settled, nil
}

// queueRetry queues plan's attempt as a delayed run-now task and marks the
// failed attempt superseded by it. A task of the same key already queued
// (another replica recorded the same attempt) is left as it is.
func queueRetry(ctx context.Context, tx pgx.Tx, job CronJob, at time.Time, runID int64, plan retryPlan) error {
	_, err := tx.Exec(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version, run_key, not_before)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (run_key) WHERE action = 'run_now' AND run_key <> '' DO NOTHING`,
		job.ID, wire.ActionRunNow, job.Version, plan.Key, plan.Due)
	if err != nil {
		return fmt.Errorf("queue retry %s: %w", plan.Key, err)
	}
	_, err = tx.Exec(ctx, `UPDATE cron_job_runs SET superseded = true, retry_key = $2, retry_due_at = $3 WHERE id = $1 AND scheduled_at = $4`,
		runID, plan.Key, plan.Due, at)
	if err != nil {
		return fmt.Errorf("retry: supersede the failed attempt: %w", err)
	}
	return taskQueued(ctx, tx)
}

// handOn passes the failed attempts an interrupted retry followed (its
// node's shutdown stopped it: a platform_error, which settles nothing) on
// to the retry it queued: they wait for that one's result now. Else they
// would still wait for the interrupted retry's, which never comes, and
// ResolveDroppedRetries would make them count beside the next retry's
// failure: one slot counted twice.
func handOn(ctx context.Context, tx pgx.Tx, key runkey.Key, plan retryPlan) error {
	_, err := tx.Exec(ctx, `UPDATE cron_job_runs SET retry_key = $1, retry_due_at = $2 WHERE `+followedBy(3),
		plan.Key, plan.Due, key.JobID, key.Slot, key.String())
	return wrap(err, "retry: hand the attempts before on to the next retry")
}

// RetryGrace is how long after its retry was due, beyond the job's
// timeout, a failed attempt waits for that retry's report before it counts
// again: the dispatcher's poll, Temporal and the node take seconds, a
// spooled report minutes.
const RetryGrace = 15 * time.Minute

// ResolveDroppedRetries makes a failed attempt count again when the retry
// queued for it never reported a real result by its due time + the job's
// timeout + grace: the job changed or was disabled before it was sent,
// the runner refused it (past the next slot), or its node died. The
// failure is then its slot's last attempt. The sweep writes no lost record
// for a retry: a retry is not a slot. It returns how many it resolved; the
// counter takes them in at the job's next recorded outcome.
func (s *Store) ResolveDroppedRetries(ctx context.Context, now time.Time, grace time.Duration) (int64, error) {
	return Chores{s.pool}.ResolveDroppedRetries(ctx, now, grace)
}

// ResolveDroppedRetries is Store.ResolveDroppedRetries on the chores'
// connection.
func (c Chores) ResolveDroppedRetries(ctx context.Context, now time.Time, grace time.Duration) (int64, error) {
	tag, err := c.db.Exec(ctx, `
		UPDATE cron_job_runs r SET superseded = false, retry_due_at = NULL
		FROM cron_jobs j
		WHERE j.id = r.cron_job_id AND r.retry_due_at IS NOT NULL
		  AND r.retry_due_at + make_interval(secs => j.timeout_seconds) + $2::interval < $1
		  -- A retry is of its failed attempt's slot (runlookup.go): one month.
		  AND NOT EXISTS (SELECT 1 FROM cron_job_runs x WHERE `+runIdentity("x.", "r.retry_key", "r.cron_job_id")+`
		                  AND x.scheduled_at = r.scheduled_at
		                  AND x.result NOT IN `+placeholderResults+`)`,
		now, grace)
	if err != nil {
		return 0, fmt.Errorf("resolve dropped retries: %w", err)
	}
	return tag.RowsAffected(), nil
}
