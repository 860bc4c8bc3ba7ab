package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

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
	// Added fields; the ones above keep their names.
	// the run key's (scheduled, manual), or catchup for a scheduled key
	Trigger wire.Trigger `json:"trigger"`
	Attempt int          `json:"attempt"` // 1 until retries exist
	// What the command used (null when the node did not say), warnings
	// when it came near its limits (usageWarnings), and the systemd
	// invocation its output lines carry ("" for runs of older nodes).
	CPUSeconds      *float64 `json:"cpu_seconds"`
	PeakMemoryBytes *int64   `json:"peak_memory_bytes"`
	Warnings        []string `json:"warnings"`
	InvocationID    string   `json:"invocation_id"`
	// Whether the journal's (and Loki's) copy of the output was cut, and
	// by how many bytes the runner dropped (wire.Outcome).
	OutputTruncated    bool  `json:"output_truncated"`
	OutputDroppedBytes int64 `json:"output_dropped_bytes"`
}

// runColumns are Run's columns in its field order.
const runColumns = `id, run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at, duration_ms,
	result, exit_code, signal, failure_reason, received_at, trigger, attempt,
	cpu_seconds, peak_memory_bytes, warnings, invocation_id, output_truncated, output_dropped_bytes`

// RunDetail is one run as GET …/runs/{run} shows it: the run and the end
// of its output, up to 4 KiB, which the listings leave out (a page of
// 1000 runs would carry 4 MiB of it). OutputTail is null when no output
// was captured (no command ran, a node from before the tail, a runner
// killed before its record was final); "" is a command that wrote nothing.
type RunDetail struct {
	Run
	OutputTail *string `json:"output_tail"`
}

// runDetailColumns are RunDetail's columns in its field order.
const runDetailColumns = runColumns + `, output_tail`

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
	// What the command used and its output's handle (wire.Outcome).
	CPUSeconds      *float64
	PeakMemoryBytes *int64
	InvocationID    string
	// The end of its output and what the journal lost (wire.Outcome).
	OutputTail         *string
	OutputTruncated    bool
	OutputDroppedBytes int64
	// Trigger is the run's (wire.RecordedTrigger, checked by the API):
	// the key's, or catchup for a scheduled key.
	Trigger wire.Trigger
}

// OutcomeResult tells what recording an outcome did.
type OutcomeResult struct {
	Duplicate    bool // the run key was known: nothing changed
	Replaced     bool // the outcome replaced a lost or overlap_skipped record
	AutoDisabled bool // this outcome crossed the threshold
	Reenabled    bool // the replaced record had caused an auto-disable, now lifted
	// Deleted: the job was deleted before the outcome arrived; the run
	// was recorded (or was a duplicate) under its tombstone, and Job
	// holds only the tombstone's id, tenant, name and version.
	Deleted bool
	Job     CronJob
	// Retry is the key of the retry this outcome queued ("" none).
	Retry string
}

// recentRuns bounds the history a recount reads: the counter saturates at
// the largest max_failures allowed.
const recentRuns = 1000

// ErrVersionAhead refuses an outcome naming a job version the core never
// issued: a node's report is input, not truth.
var ErrVersionAhead = errors.New("outcome version is above the job's")

// RecordOutcome stores a node's outcome for a job on that node's shard. In
// one transaction it inserts the run (idempotent by run key; a real result
// replaces a lost or overlap_skipped record), recounts the job's failures
// and auto-disables the job (queueing the disable on all nodes) or lifts
// an auto-disable the replaced record caused (queueing the enable). The
// job row is locked first, so outcomes of one job count one after another.
func (s *Store) RecordOutcome(ctx context.Context, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	var res OutcomeResult
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		job, err := scanJob(tx.QueryRow(ctx, `
			SELECT `+jobColumns+` FROM cron_jobs
			WHERE id = $1 AND tenant_id IN (SELECT id FROM tenants WHERE shard_id = $2) FOR UPDATE`, jobID, node.ShardID))
		if errors.Is(err, pgx.ErrNoRows) {
			res, err = recordLateOutcome(ctx, tx, node, jobID, o)
			return err
		}
		if err != nil {
			return notFound(err, "outcome: cron job on this node's shard")
		}
		res.Job = job
		if o.Version > job.Version {
			return fmt.Errorf("%w: %d, the job is at %d", ErrVersionAhead, o.Version, job.Version)
		}
		stored, err := storedResult(ctx, tx, jobID, o.RunKey)
		if err != nil {
			return err
		}
		step := decideRecord(stored, o.Result)
		if step == duplicateRun {
			res.Duplicate = true // a redelivery changes nothing
			return nil
		}
		runID, err := writeRun(ctx, tx, node, jobID, o, step, usageWarnings(job, o))
		if err != nil {
			return err
		}
		if err := endStart(ctx, tx, o.RunKey, o.Result); err != nil {
			return err
		}
		if err := startSweepOnOutcome(ctx, tx, job, o); err != nil {
			return err
		}
		if res.Retry, err = retryAfterRecord(ctx, tx, job, o, runID); err != nil {
			return err
		}
		if job, err = noteLastRun(ctx, tx, job, LastRun{ID: runID, At: o.ScheduledAt, Result: o.Result, FailureReason: o.FailureReason}); err != nil {
			return err
		}
		res.Replaced = step == replaceRun
		var st autoDisableStep
		if res.Job, st, err = recount(ctx, tx, job, res.Replaced); err != nil {
			return err
		}
		res.AutoDisabled, res.Reenabled = st == tripAutoDisable, st == liftAutoDisable
		// The tenant's notifications are written with the run: an
		// outcome recorded is an outcome notified (the outbox); so is the
		// operator's platform_error.
		if err := notifyOutcome(ctx, tx, job, res, runID, o.Result); err != nil {
			return err
		}
		return notifyOperatorOutcome(ctx, tx, node, job, false, o)
	})
	woke(err)
	return res, err
}

// startSweepOnOutcome starts the lost-run sweep of a job a node reported a
// run of (sweepAfterOutcome), inside tx, which holds the job's row.
func startSweepOnOutcome(ctx context.Context, tx pgx.Tx, job CronJob, o Outcome) error {
	var swept *time.Time
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT swept_until, now() FROM cron_jobs WHERE id = $1`, job.ID).Scan(&swept, &now); err != nil {
		return fmt.Errorf("outcome: read sweep: %w", err)
	}
	from := sweepAfterOutcome(swept, o.Version, job.Version, evidenceAt(o, now), now)
	if from == swept {
		return nil
	}
	_, err := tx.Exec(ctx, `UPDATE cron_jobs SET swept_until = $2 WHERE id = $1`, job.ID, *from)
	return wrap(err, "outcome: start sweep")
}

// sweepAfterOutcome decides where the lost-run sweep of a job stands after
// a node reported a run of version of the job at slot (swept is where it
// stood; jobVersion the job's current version). A result of any kind for
// the current version proves that a node has the current schedule, however
// it got there (a converge, a provisioning whose verdict said no node took
// it), so a sweep that had not started starts:
//   - at the run's slot: the timers do not catch up (Persistent=no), so the
//     node had the schedule when the slot fired; slots before it are never
//     counted, and the slots after it are the node's;
//   - never later than now, whatever slot a node claims.
//
// A run of an older version proves nothing about the current schedule
// (a schedule change may have come since), and a sweep that had started
// goes on where it was.
func sweepAfterOutcome(swept *time.Time, version, jobVersion int64, slot, now time.Time) *time.Time {
	if swept != nil || version != jobVersion {
		return swept
	}
	from := slot
	if from.After(now) {
		from = now
	}
	return &from
}

// storedResult is the result recorded under a run key, nil if none.
func storedResult(ctx context.Context, tx pgx.Tx, jobID, runKey string) (*wire.Result, error) {
	var r wire.Result
	err := tx.QueryRow(ctx, `SELECT result FROM cron_job_runs WHERE run_key = $1 AND cron_job_id = $2`, runKey, jobID).Scan(&r)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("outcome: read run: %w", err)
	}
	return &r, nil
}

// writeRun inserts the run, or replaces the record under its run key, and
// returns the record's id.
func writeRun(ctx context.Context, tx pgx.Tx, node Node, jobID string, o Outcome, step recordStep, warnings []string) (int64, error) {
	var duration *int64
	if o.StartedAt != nil && o.FinishedAt != nil {
		d := o.FinishedAt.Sub(*o.StartedAt).Milliseconds()
		duration = &d
	}
	args := pgx.NamedArgs{
		"run_key": o.RunKey, "cron_job_id": jobID, "version": o.Version, "node_id": node.ID,
		"scheduled_at": o.ScheduledAt, "started_at": o.StartedAt, "finished_at": o.FinishedAt,
		"duration_ms": duration, "result": o.Result, "exit_code": o.ExitCode, "signal": o.Signal,
		"failure_reason": o.FailureReason,
		"cpu_seconds":    o.CPUSeconds, "peak_memory_bytes": o.PeakMemoryBytes, "warnings": warnings, "invocation_id": o.InvocationID,
		"output_tail": o.OutputTail, "output_truncated": o.OutputTruncated, "output_dropped_bytes": o.OutputDroppedBytes,
		"trigger": o.Trigger,
	}
	sql := `INSERT INTO cron_job_runs (run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at,
		                           duration_ms, result, exit_code, signal, failure_reason,
		                           cpu_seconds, peak_memory_bytes, warnings, invocation_id,
		                           output_tail, output_truncated, output_dropped_bytes, trigger)
		VALUES (@run_key, @cron_job_id, @version, @node_id, @scheduled_at, @started_at, @finished_at,
		        @duration_ms, @result, @exit_code, @signal, @failure_reason,
		        @cpu_seconds, @peak_memory_bytes, @warnings, @invocation_id,
		        @output_tail, @output_truncated, @output_dropped_bytes, NULLIF(@trigger, '')) RETURNING id`
	if step == replaceRun {
		// Every column of the run is the new report's: the replaced
		// placeholder's output (none) must not outlive it, nor a
		// cancelled record's stand beside another node's real run.
		sql = `UPDATE cron_job_runs SET version = @version, node_id = @node_id, started_at = @started_at,
			       finished_at = @finished_at, duration_ms = @duration_ms, result = @result, exit_code = @exit_code,
			       signal = @signal, failure_reason = @failure_reason, received_at = now(),
			       cpu_seconds = @cpu_seconds, peak_memory_bytes = @peak_memory_bytes, warnings = @warnings,
			       invocation_id = @invocation_id, output_tail = @output_tail, output_truncated = @output_truncated,
			       output_dropped_bytes = @output_dropped_bytes,
			       trigger = coalesce(NULLIF(@trigger, ''), split_part(run_key, '#', 2))
			WHERE run_key = @run_key AND cron_job_id = @cron_job_id RETURNING id`
	}
	var id int64
	if err := tx.QueryRow(ctx, sql, args).Scan(&id); err != nil {
		return 0, fmt.Errorf("outcome: write run: %w", err)
	}
	return id, nil
}

// LastRun is a recorded run as a job's last_* fields see it.
type LastRun struct {
	ID            int64 // the record's id: breaks a tie of slots
	At            time.Time
	Result        wire.Result
	FailureReason string
}

// decideLastRun is what a job shows of its runs (cur) once run is
// recorded (inserted, or replacing the record with its id), and whether
// that changed. The last run is the newest by slot, then by record id (the
// runs listing's order), never the last to arrive: an outcome spooled
// through an outage, or one replacing a lost, overlap_skipped or
// platform_error record of an older slot, leaves a newer slot's run
// standing; a replacement of the standing record itself (same id) takes
// its place. A lost record is the sweeper's, not a node's report: it
// changes nothing. The last success is the newest successful slot.
func decideLastRun(cur LastRuns, run LastRun) (LastRuns, bool) {
	if run.Result == wire.ResultLost {
		return cur, false
	}
	next := cur
	changed := false
	newest := cur.LastRunAt == nil || cur.lastRunID == nil || run.At.After(*cur.LastRunAt) ||
		(run.At.Equal(*cur.LastRunAt) && run.ID >= *cur.lastRunID)
	if newest {
		at, result, id := run.At, run.Result, run.ID
		next.lastRunID, next.LastRunAt, next.LastResult = &id, &at, &result
		next.LastFailureReason = run.FailureReason
		if run.Result == wire.ResultSuccess {
			next.LastFailureReason = ""
		}
		changed = true
	}
	if run.Result == wire.ResultSuccess && (cur.LastSuccessAt == nil || run.At.After(*cur.LastSuccessAt)) {
		at := run.At
		next.LastSuccessAt = &at
		changed = true
	}
	return next, changed
}

// noteLastRun applies decideLastRun to job (whose row tx holds) and stores
// the result.
func noteLastRun(ctx context.Context, tx pgx.Tx, job CronJob, run LastRun) (CronJob, error) {
	next, changed := decideLastRun(job.LastRuns, run)
	if !changed {
		return job, nil
	}
	job.LastRuns = next
	_, err := tx.Exec(ctx, `UPDATE cron_jobs SET last_run_id = $2, last_run_at = $3, last_result = $4,
		       last_failure_reason = $5, last_success_at = $6 WHERE id = $1`,
		job.ID, next.lastRunID, next.LastRunAt, next.LastResult, next.LastFailureReason, next.LastSuccessAt)
	return job, wrap(err, "outcome: note last run")
}

// recount recomputes the failure counter from the job's recent counted
// results in slot order (runs before the last enable or retry excluded,
// uncountedTriggers, and failed attempts a retry superseded: only a slot's
// last attempt counts) and applies the verdict: the counter, a trip or a
// lift.
func recount(ctx context.Context, tx pgx.Tx, job CronJob, replaced bool) (CronJob, autoDisableStep, error) {
	rows, err := tx.Query(ctx, `
		SELECT result FROM (
			SELECT result, scheduled_at, id FROM cron_job_runs
			WHERE cron_job_id = $1 AND result = ANY($2) AND trigger <> ALL($4) AND NOT superseded
			  AND id > (SELECT failures_after_run FROM cron_jobs WHERE id = $1)
			ORDER BY scheduled_at DESC, id DESC LIMIT $3) recent
		ORDER BY scheduled_at, id`, job.ID, countedResults(), recentRuns, uncountedTriggers)
	if err != nil {
		return job, keepState, fmt.Errorf("recount failures: %w", err)
	}
	results, err := pgx.CollectRows(rows, pgx.RowTo[wire.Result])
	if err != nil {
		return job, keepState, fmt.Errorf("recount failures: %w", err)
	}
	failures, disable := CountFailures(results, job.MaxFailures)
	// A replaced record lifts an auto-disable only if it broke the streak
	// (the recount fell): a placeholder counted nothing, so a failure that
	// replaces one never lowers the count, and must never re-enable a job
	// whose threshold was raised while it stood disabled.
	step := decideAutoDisable(job, disable, replaced && failures < job.ConsecutiveFailures)
	switch step {
	case tripAutoDisable:
		job, err = autoDisable(ctx, tx, job.ID, failures)
	case liftAutoDisable:
		job, err = liftAutoDisabled(ctx, tx, job.ID, failures)
	default:
		if failures != job.ConsecutiveFailures {
			job.ConsecutiveFailures = failures
			_, err = tx.Exec(ctx, `UPDATE cron_jobs SET consecutive_failures = $2 WHERE id = $1`, job.ID, failures)
			err = wrap(err, "count failures")
		}
	}
	return job, step, err
}

// autoDisable disables the job at the threshold and queues the disable
// on all nodes.
func autoDisable(ctx context.Context, tx pgx.Tx, id string, failures int) (CronJob, error) {
	msg := fmt.Sprintf("disabled after %d consecutive failures", failures)
	job, err := scanJob(tx.QueryRow(ctx, `
		UPDATE cron_jobs SET consecutive_failures = $2, enabled = false, status = $3, status_message = $4,
		       version = version + 1, updated_at = now()
		WHERE id = $1 RETURNING `+jobColumns, id, failures, wire.StatusAutoDisabled, msg))
	if err != nil {
		return job, wrap(err, "auto-disable")
	}
	if err := recordEvent(ctx, tx, job, ActorSystem, string(wire.ActionAutoDisable), map[string]any{"consecutive_failures": failures}); err != nil {
		return job, err
	}
	return job, queueTask(ctx, tx, id, wire.ActionAutoDisable, job.Version)
}

// liftAutoDisabled enables a job whose auto-disable a replaced record had
// caused, and queues the enable on all nodes as EnableJob does. The
// counter keeps the recounted value: the history still holds those
// failures.
func liftAutoDisabled(ctx context.Context, tx pgx.Tx, id string, failures int) (CronJob, error) {
	job, err := scanJob(tx.QueryRow(ctx, `
		UPDATE cron_jobs SET consecutive_failures = $2, enabled = true, status = $3, status_message = '',
		       disabled_reason = '', not_before = now(), swept_until = NULL, version = version + 1, updated_at = now()
		WHERE id = $1 RETURNING `+jobColumns, id, failures, wire.StatusPending))
	if err != nil {
		return job, wrap(err, "lift auto-disable")
	}
	// A late real outcome replaced the record that tripped it.
	if err := recordEvent(ctx, tx, job, ActorSystem, "auto_disable_lifted", map[string]any{"consecutive_failures": failures}); err != nil {
		return job, err
	}
	return job, queueTask(ctx, tx, id, wire.ActionEnable, job.Version)
}

func wrap(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// ListRuns returns a job's runs, newest slot first.
func (s *Store) ListRuns(ctx context.Context, jobID string, limit int) ([]Run, error) {
	runs, _, err := s.PageRuns(ctx, jobID, RunQuery{Limit: limit})
	return runs, err
}

// RunPos is a position in a job's runs listing, which is ordered by
// (scheduled_at, id), newest first.
type RunPos struct {
	ScheduledAt time.Time
	ID          int64
}

// RunQuery selects a page of a job's runs.
type RunQuery struct {
	Results  []wire.Result  // none: any
	Triggers []wire.Trigger // none: any
	From, To *time.Time     // scheduled_at in [From, To); nil: open
	Before   *RunPos        // nil: from the newest
	Limit    int            // at least 1
}

// PageRuns returns a page of a job's runs, newest slot first, and the
// position after which the next page starts (nil: this was the last).
func (s *Store) PageRuns(ctx context.Context, jobID string, q RunQuery) ([]Run, *RunPos, error) {
	sql, args := pageRunsSQL(jobID, q)
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Run])
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	runs, more := page(runs, q.Limit)
	if !more {
		return runs, nil, nil
	}
	last := runs[len(runs)-1]
	return runs, &RunPos{ScheduledAt: last.ScheduledAt, ID: last.ID}, nil
}

// pageRunsSQL builds the statement of a page of runs with only the
// conditions q asks for, each one an index can serve (a condition such as
// "$n IS NULL OR ..." would leave a cached generic plan scanning from the
// newest run to the cursor). Values are always bound, never spliced.
func pageRunsSQL(jobID string, q RunQuery) (string, []any) {
	args := []any{jobID}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	sql := `SELECT ` + runColumns + ` FROM cron_job_runs WHERE cron_job_id = $1`
	// One value is an equality, which the (job, result|trigger, slot, id)
	// index serves in order; several are a filter on the page index
	// (PostgreSQL 15 cannot merge an index's ranges in order).
	switch len(q.Results) {
	case 0:
	case 1:
		sql += ` AND result = ` + arg(string(q.Results[0]))
	default:
		sql += ` AND result = ANY(` + arg(q.Results) + `::text[])`
	}
	switch len(q.Triggers) {
	case 0:
	case 1:
		sql += ` AND trigger = ` + arg(string(q.Triggers[0]))
	default:
		sql += ` AND trigger = ANY(` + arg(q.Triggers) + `::text[])`
	}
	if q.From != nil {
		sql += ` AND scheduled_at >= ` + arg(*q.From)
	}
	if q.To != nil {
		sql += ` AND scheduled_at < ` + arg(*q.To)
	}
	if q.Before != nil {
		sql += ` AND (scheduled_at, id) < (` + arg(q.Before.ScheduledAt) + `::timestamptz, ` + arg(q.Before.ID) + `::bigint)`
	}
	sql += ` ORDER BY scheduled_at DESC, id DESC LIMIT ` + arg(q.Limit+1)
	return sql, args
}

// GetRun returns one run of a job, with the end of its output, by its
// record id or, if id is 0, by its run key; ErrNotFound if the job has no
// such run.
func (s *Store) GetRun(ctx context.Context, jobID string, id int64, runKey string) (RunDetail, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+runDetailColumns+` FROM cron_job_runs
		WHERE cron_job_id = $1 AND CASE WHEN $2::bigint = 0 THEN run_key = $3 ELSE id = $2 END`, jobID, id, runKey)
	if err != nil {
		return RunDetail{}, fmt.Errorf("get run: %w", err)
	}
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[RunDetail])
	return run, notFound(err, "get run")
}
