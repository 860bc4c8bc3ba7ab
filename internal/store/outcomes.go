package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hostcron/hostcron/internal/runkey"
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
	// Shutdown: a platform_error the node's shutdown caused (wire.Outcome).
	Shutdown bool
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

// RecordOutcome stores a node's outcome for a job on that node's shard,
// alone in its own transaction (recordOneOutcome, then the operator's
// platform_error). The core API records through an OutcomeBatcher, which
// groups concurrent outcomes into one transaction (RecordOutcomes) and
// answers each exactly as this would.
func (s *Store) RecordOutcome(ctx context.Context, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	var res OutcomeResult
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if res, err = recordOneOutcome(ctx, tx, node, jobID, o); err != nil {
			return err
		}
		if !needsOperatorNote(res) {
			return nil
		}
		return notifyOperatorOutcome(ctx, tx, node, res.Job, false, o)
	})
	woke(err)
	return res, err
}

// needsOperatorNote tells whether a recorded outcome may owe the operator
// a platform_error (notifyOperatorOutcome decides by its result): only a
// run newly recorded for a live job; a redelivery or a deleted job's late
// report never does.
func needsOperatorNote(res OutcomeResult) bool {
	return !res.Duplicate && !res.Deleted
}

// recordOneOutcome is everything recording one outcome does to its job,
// inside tx, whether tx holds this outcome alone (RecordOutcome) or a
// batch (RecordOutcomes, which calls it once per outcome in job id
// order): it inserts the run (idempotent by run key; a real result
// replaces a lost or overlap_skipped record), recounts the job's failures
// and auto-disables the job (queueing the disable on all nodes) or lifts
// an auto-disable the replaced record caused (queueing the enable), and
// writes the tenant's notification events. The job row is locked first,
// so outcomes of one job count one after another. It locks nothing
// another job's outcome needs: the operator's platform_error, which a
// whole shard shares, is the caller's to write (needsOperatorNote), so a
// batch writes it after it holds every job lock it needs.
func recordOneOutcome(ctx context.Context, tx pgx.Tx, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	var res OutcomeResult
	if err := outcomeSlotMismatch(o); err != nil {
		return res, err
	}
	locked, err := lockForOutcome(ctx, tx, node, jobID, o.RunKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return recordLateOutcome(ctx, tx, node, jobID, o)
	}
	if err != nil {
		return res, notFound(err, "outcome: cron job on this node's shard")
	}
	job := locked.job
	res.Job = job
	if o.Version > job.Version {
		return res, fmt.Errorf("%w: %d, the job is at %d", ErrVersionAhead, o.Version, job.Version)
	}
	step := decideRecord(locked.stored.result(), o.Result)
	// interrupted: o is the platform_error of a run its node's shutdown
	// stopped (stoppedOnItsNode), read before the write ends the start it
	// looks for; only for a shutdown's report (takesOverPlaceholder) or a
	// job retries touch (below).
	var interrupted, readStart bool
	if step == duplicateRun && takesOverPlaceholder(locked.stored, o, node.ID) {
		if interrupted, err = stoppedOnItsNode(ctx, tx, node.ID, o); err != nil {
			return res, err
		}
		readStart = true
		if interrupted {
			step = replaceRun
		}
	}
	if step == duplicateRun {
		res.Duplicate = true // a redelivery changes nothing in the history
		if IsPlaceholder(o.Result) {
			// A node whose own run ended (its shutdown stopped it) may
			// find another node's placeholder under the key first (the
			// whole shard rebooting): its start still ends (endStart).
			return res, endStart(ctx, tx, node.ID, o)
		}
		return res, nil
	}
	res.Replaced = step == replaceRun
	sweep := sweepMoveAfterOutcome(job, locked.swept, o, locked.now)
	// An outcome retries touch (a job with retries, or a retry's own
	// outcome) decides its retry between the run's write and the recount:
	// the retry marks failed attempts superseded, which the recount leaves
	// out. Others read the recount in the write's round trip.
	retrying := mayRetry(job, o)
	if retrying && !readStart {
		if interrupted, err = stoppedOnItsNode(ctx, tx, node.ID, o); err != nil {
			return res, err
		}
	}
	runID, results, err := writeOutcomeRun(ctx, tx, node, job, o, locked.stored, !retrying)
	if err != nil {
		return res, err
	}
	var settled bool // a retry's counted result settled the attempt it was queued for
	if retrying {
		if res.Retry, settled, err = retryAfterRecord(ctx, tx, job, o, recordAt(o, locked.stored), runID, interrupted); err != nil {
			return res, err
		}
		if results, err = readRecount(ctx, tx, job.ID); err != nil {
			return res, err
		}
	}
	run := LastRun{ID: runID, At: o.ScheduledAt, Result: o.Result, FailureReason: o.FailureReason}
	failures, st := decideRecount(job, results, correctsHistory(res.Replaced, settled, o.Result))
	res.AutoDisabled, res.Reenabled = st == tripAutoDisable, st == liftAutoDisable
	if st != keepState {
		// A trip or a lift (rare) bumps the version the event and the
		// queued task carry: one statement after another.
		if job, err = noteLastRun(ctx, tx, job, run, sweep, job.ConsecutiveFailures); err != nil {
			return res, err
		}
		if res.Job, err = applyAutoDisable(ctx, tx, job, st, failures); err != nil {
			return res, err
		}
		return res, notifyOutcome(ctx, tx, job, res, runID, recordAt(o, locked.stored), o.Result)
	}
	// The job's last run, its counter and the tenant's notifications (an
	// outcome recorded is an outcome notified: the outbox) in one round
	// trip, in this order: the events read the counter. The last run,
	// the sweep's move and the counter are one UPDATE of the job's row:
	// one row version, and its triggers (004, 011) and foreign-key checks
	// (a row already updated in this transaction is checked again) fire
	// once, not twice for every outcome that changes the counter.
	pipe := &pgx.Batch{}
	if job, err = noteLastRun(ctx, queued{pipe}, job, run, sweep, failures); err != nil {
		return res, err
	}
	res.Job = job
	res.Job.ConsecutiveFailures = failures
	if locked.tenantTargets {
		if err := notifyOutcome(ctx, queued{pipe}, job, res, runID, recordAt(o, locked.stored), o.Result); err != nil {
			return res, err
		}
	}
	return res, sendPipe(ctx, tx, pipe, "outcome: last run, failure count and notifications")
}

// lockedJob is what recording an outcome reads with the job's row lock.
type lockedJob struct {
	job    CronJob
	swept  *time.Time // swept_until
	now    time.Time  // the transaction's
	stored *storedRun // the record under the run key, nil if none
	// tenantTargets: the tenant has a notification target. Without one,
	// no outcome of its jobs emits an event, and the events statement
	// (the costliest of an outcome's: docs/benchmarks.md) is left out.
	tenantTargets bool
}

// lockForOutcome locks the job's row (on the node's shard) and reads the
// result recorded under the run key, in one round trip: the read is a
// statement after the lock, so it sees what the lock's previous holder
// committed (READ COMMITTED takes each statement's snapshot at its start).
// pgx.ErrNoRows: no such job on the shard.
// The read names the key's slot when it has one (runKeyWhere): one probe
// of one month's identity index instead of one per month.
func lockForOutcome(ctx context.Context, tx pgx.Tx, node Node, jobID, runKey string) (lockedJob, error) {
	var l lockedJob
	pipe := &pgx.Batch{}
	pipe.Queue(`SELECT `+jobColumns+`, swept_until, now(),
		       EXISTS (SELECT 1 FROM notification_targets t WHERE t.tenant_id = cron_jobs.tenant_id)
		FROM cron_jobs
		WHERE id = $1 AND tenant_id IN (SELECT id FROM tenants WHERE shard_id = $2) FOR UPDATE`, jobID, node.ShardID).
		QueryRow(func(row pgx.Row) error {
			var err error
			l.job, err = scanJob(withExtra{row, []any{&l.swept, &l.now, &l.tenantTargets}})
			return err
		})
	sql, args := storedRunQuery(jobID, runKey)
	pipe.Queue(sql, args...).QueryRow(func(row pgx.Row) error {
		var err error
		l.stored, err = scanStoredRun(row)
		return err
	})
	err := tx.SendBatch(ctx, pipe).Close()
	return l, err
}

// withExtra scans a row into the destinations given, then extra: a job's
// columns (scanJob) followed by more.
type withExtra struct {
	pgx.Row
	extra []any
}

func (r withExtra) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// writeOutcomeRun writes the run (inserted, or replacing its record), ends
// its start and reads the job's recent counted results for the recount, in one round trip; it
// returns the run's record id and those results, oldest slot first
// (none without withRecount: the caller reads them, readRecount).
func writeOutcomeRun(ctx context.Context, tx pgx.Tx, node Node, job CronJob, o Outcome, stored *storedRun, withRecount bool) (int64, []wire.Result, error) {
	var runID int64
	var results []wire.Result
	pipe := &pgx.Batch{}
	sql, args := runWrite(node, job.ID, o, stored, usageWarnings(job, o))
	pipe.Queue(sql, args).QueryRow(func(row pgx.Row) error {
		return wrap(row.Scan(&runID), "outcome: write run")
	})
	if err := endStart(ctx, queued{pipe}, node.ID, o); err != nil {
		return 0, nil, err
	}
	if withRecount {
		pipe.Queue(recountSQL, job.ID, countedResults(), recentRuns, uncountedTriggers).Query(func(rows pgx.Rows) error {
			var err error
			results, err = pgx.CollectRows(rows, pgx.RowTo[wire.Result])
			return wrap(err, "recount failures")
		})
	}
	return runID, results, sendPipe(ctx, tx, pipe, "outcome: write run")
}

// readRecount reads a job's recent counted results (recountSQL) on their
// own, after a retry decision changed which of them count.
func readRecount(ctx context.Context, tx pgx.Tx, jobID string) ([]wire.Result, error) {
	rows, err := tx.Query(ctx, recountSQL, jobID, countedResults(), recentRuns, uncountedTriggers)
	if err != nil {
		return nil, fmt.Errorf("recount failures: %w", err)
	}
	results, err := pgx.CollectRows(rows, pgx.RowTo[wire.Result])
	return results, wrap(err, "recount failures")
}

// mayRetry tells whether recording o may queue or end a retry: its job
// retries failed runs, or o is a retry's outcome (whose job may have
// stopped retrying since).
func mayRetry(job CronJob, o Outcome) bool {
	if job.Retries > 0 {
		return true
	}
	k, err := runkey.Parse(o.RunKey)
	return err == nil && k.Trigger == wire.TriggerRetry
}

// sweepChange is the sweep start to write, nil when it stays.
func sweepChange(swept, next *time.Time) *time.Time {
	if next == swept {
		return nil
	}
	return next
}

// queued is an execer that queues statements on a pipeline instead of
// running them; their errors come when the pipeline is sent (sendPipe).
type queued struct{ pipe *pgx.Batch }

func (q queued) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.pipe.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// execer runs a statement: a transaction, or a pipeline being built
// (queued).
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// sendPipe runs the queued statements in tx in one round trip; the first
// error (a statement's, or a callback's) is returned.
func sendPipe(ctx context.Context, tx pgx.Tx, pipe *pgx.Batch, what string) error {
	if pipe.Len() == 0 {
		return nil
	}
	return wrap(tx.SendBatch(ctx, pipe).Close(), what)
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

// storedRun is the record under a run key: its result and its slot
// (scheduled_at, which a replacement names to find it in its month).
type storedRun struct {
	Result wire.Result
	At     time.Time
	NodeID *string // the node that reported it; nil for the sweeper's
}

// takesOverPlaceholder tells whether o may replace the record stored under
// its key that decideRecord calls it a duplicate of: o is a shutdown's
// platform_error (wire.Outcome.Shutdown) and the record another node's
// platform_error or cancelled. That node did not run the slot (its
// storage failed at the election, a cancel caught it electing); if o's
// node did (its start is recorded: the caller asks stoppedOnItsNode), o
// is the slot's true record, and its attempt is retried as a failure
// would be. Pure.
func takesOverPlaceholder(stored *storedRun, o Outcome, nodeID string) bool {
	return stored != nil && o.Shutdown && o.Result == wire.ResultPlatformError &&
		(stored.Result == wire.ResultPlatformError || stored.Result == wire.ResultCancelled) &&
		stored.NodeID != nil && *stored.NodeID != nodeID
}

// result is the stored result, nil when there is no record.
func (r *storedRun) result() *wire.Result {
	if r == nil {
		return nil
	}
	return &r.Result
}

// recordAt is the slot of the record an outcome writes: a replaced
// record keeps its own (the row is updated where it is), a new one is
// the outcome's.
func recordAt(o Outcome, stored *storedRun) time.Time {
	if stored != nil {
		return stored.At
	}
	return o.ScheduledAt
}

// storedRunQuery reads the record of a job's run key (storedRun).
func storedRunQuery(jobID, runKey string) (string, []any) {
	cond, args := runKeyWhere("", runKey, 2)
	return `SELECT result, scheduled_at, node_id FROM cron_job_runs WHERE cron_job_id = $1 AND ` + cond, append([]any{jobID}, args...)
}

// scanStoredRun scans storedRunQuery's row; nil when there is none.
func scanStoredRun(row pgx.Row) (*storedRun, error) {
	var r storedRun
	err := row.Scan(&r.Result, &r.At, &r.NodeID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("outcome: read run: %w", err)
	}
	return &r, nil
}

// storedResult is the record under a run key, nil if none.
func storedResult(ctx context.Context, tx pgx.Tx, jobID, runKey string) (*storedRun, error) {
	sql, args := storedRunQuery(jobID, runKey)
	return scanStoredRun(tx.QueryRow(ctx, sql, args...))
}

// writeRun inserts the run, or replaces the record stored under its run
// key, and returns the record's id.
func writeRun(ctx context.Context, tx pgx.Tx, node Node, jobID string, o Outcome, stored *storedRun, warnings []string) (int64, error) {
	sql, args := runWrite(node, jobID, o, stored, warnings)
	var id int64
	if err := tx.QueryRow(ctx, sql, args).Scan(&id); err != nil {
		return 0, fmt.Errorf("outcome: write run: %w", err)
	}
	return id, nil
}

// runWrite is the statement writeRun runs: it returns the record's id.
// With a stored record (decideRecord said replace: the caller never
// writes a duplicate) it updates that record, found by its run key and
// its slot (one month's index); else it inserts the run.
func runWrite(node Node, jobID string, o Outcome, stored *storedRun, warnings []string) (string, pgx.NamedArgs) {
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
	if stored != nil {
		// By the key's identity (runKeyWhere's values) at the slot the
		// read found.
		k := keyIdentity(o.RunKey)
		args["stored_at"] = stored.At
		args["key_trigger"], args["key_request"], args["key_attempt"] = string(k.Trigger), k.Request, k.AttemptNumber()
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
			WHERE cron_job_id = @cron_job_id AND key_trigger = @key_trigger AND key_request = @key_request
			  AND attempt = @key_attempt AND scheduled_at = @stored_at RETURNING id`
	}
	return sql, args
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
// the result, with what the outcome moves of the job's sweep
// (sweepMoveAfterOutcome) and its recounted failure counter (failures;
// written only when it differs from the job's) in the same statement: one
// new row version instead of up to three (the sweep's columns are
// indexed, so the row's update is not HOT either way). The job returned
// carries its last runs; its counter stays the one before (the tenant's
// events compare the two).
func noteLastRun(ctx context.Context, tx execer, job CronJob, run LastRun, sweep sweepMove, failures int) (CronJob, error) {
	next, changed := decideLastRun(job.LastRuns, run)
	if changed {
		job.LastRuns = next
	}
	var counter *int
	if failures != job.ConsecutiveFailures {
		counter = &failures
	}
	sql, args := outcomeJobWrite(job.ID, next, changed, sweep, counter)
	if sql == "" {
		return job, nil
	}
	_, err := tx.Exec(ctx, sql, args...)
	return job, wrap(err, "outcome: note last run")
}

// lastRunWrite is the UPDATE of a job's last run columns (when changed)
// and its sweep columns (when sweep moves them); "" when neither. Without
// sweep_due_at in the statement, the trigger of migration 011 bounds it.
func lastRunWrite(jobID string, next LastRuns, changed bool, sweep sweepMove) (string, []any) {
	return outcomeJobWrite(jobID, next, changed, sweep, nil)
}

// outcomeJobWrite is lastRunWrite with the failure counter too, when
// failures is not nil (the recount changed it).
func outcomeJobWrite(jobID string, next LastRuns, changed bool, sweep sweepMove, failures *int) (string, []any) {
	var set []string
	args := []any{jobID}
	col := func(name string, v any) {
		args = append(args, v)
		set = append(set, fmt.Sprintf("%s = $%d", name, len(args)))
	}
	if changed {
		col("last_run_id", next.lastRunID)
		col("last_run_at", next.LastRunAt)
		col("last_result", next.LastResult)
		col("last_failure_reason", next.LastFailureReason)
		col("last_success_at", next.LastSuccessAt)
	}
	if sweep.sweptUntil != nil {
		col("swept_until", *sweep.sweptUntil)
		if sweep.exact {
			col("sweep_due_at", sweep.dueAt)
		}
	}
	if failures != nil {
		col("consecutive_failures", *failures)
	}
	if len(set) == 0 {
		return "", nil
	}
	return "UPDATE cron_jobs SET " + strings.Join(set, ", ") + " WHERE id = $1", args
}

// inFailureWindow is recountSQL's test of a run of job $1 against the
// window the last enable or retry started: recorded after it (by run id),
// and started after the last one that lifted a disable (migration 031): a
// run in flight at an auto-disable, or a run-now of the disabled job,
// that reports after the tenant's enable belongs to the old streak. A
// scheduled, catch-up or retry run goes by its slot; a run-now by its
// request, since its scheduled_at is the node's clock (a node behind
// would date a run-now made after the enable before it). A manual key
// whose request is no task id (none the core makes) goes by its time.
const inFailureWindow = `id > (SELECT failures_after_run FROM cron_jobs WHERE id = $1)
			  AND CASE WHEN key_trigger = 'manual' AND key_request ~ '^[1-9][0-9]{0,17}$'
			           THEN key_request::bigint > (SELECT failures_after_request FROM cron_jobs WHERE id = $1)
			           ELSE scheduled_at >= (SELECT failures_from FROM cron_jobs WHERE id = $1) END`

// recountSQL reads a job's ($1) recent counted results ($2, at most $3)
// in slot order, runs outside the failure window excluded
// (inFailureWindow), and runs
// of uncounted triggers ($4, backfills) and failed attempts a retry
// superseded (only a slot's last attempt counts): what the failure
// counter is recomputed from.
//
// It reads them only from the slot of the newest counted success on
// (every run when there is none): CountFailures counts the failures after
// the last success, and every counted run after that success is a
// failure, so the runs before it cannot change the count. Of the window
// of the $3 newest counted runs, the runs from that slot on are a
// suffix: when it is shorter than $3 it holds the success and every run
// after it, and the count is the window's; when it is longer, the LIMIT
// makes it the window. Reading the whole window instead cost 5.8 ms per
// outcome for a job with 500 runs (docs/benchmarks.md, "Outcome
// ingestion: run lookups that name the slot"); a job whose last run
// succeeded now reads its newest success and the runs of that slot.
const recountSQL = `
		SELECT result FROM (
			SELECT result, scheduled_at, id FROM cron_job_runs
			WHERE cron_job_id = $1 AND result = ANY($2) AND trigger <> ALL($4) AND NOT superseded
			  AND ` + inFailureWindow + `
			  AND scheduled_at >= coalesce((
			      SELECT scheduled_at FROM cron_job_runs
			      WHERE cron_job_id = $1 AND result = 'success' AND trigger <> ALL($4) AND NOT superseded
			        AND ` + inFailureWindow + `
			      ORDER BY scheduled_at DESC, id DESC LIMIT 1), '-infinity')
			ORDER BY scheduled_at DESC, id DESC LIMIT $3) recent
		ORDER BY scheduled_at, id`

// correctsHistory tells whether an outcome corrects the job's history
// rather than merely adding to it, so that its recount may lift an
// auto-disable (decideRecount): it replaced a record (a lost, skipped or
// platform_error placeholder), or it is a retry's success that settled
// the failed attempt the core queued that retry for (settled:
// retryAfterRecord; a retry key no retry was queued for, from a forged
// record or a confused node, corrects nothing). A retry's failed attempt
// counts nothing while the retry is pending, so a trip while it ran was
// decided with that slot's outcome unknown, and the success decides it:
// had the retry reported at once, the streak it breaks would not have
// tripped the job. Whether the housekeeper counted the attempt again
// meanwhile (ResolveDroppedRetries: the retry's report was late, spooled
// through a partition), and in which order the late reports arrive,
// change nothing (reviews s20a, s20c, s20d). Any other run in flight at
// the disable lifts nothing.
func correctsHistory(replaced, settled bool, result wire.Result) bool {
	return replaced || (settled && result == wire.ResultSuccess)
}

// decideRecount turns a job's recent counted results (recountSQL) into its
// failure counter and what that does to the job: a trip, a lift or
// nothing. An outcome that corrected the history (correctsHistory) lifts
// an auto-disable only if it broke the streak (the recount fell): a
// placeholder counted nothing, so a failure that replaces one never lowers
// the count, and must never re-enable a job whose threshold was raised
// while it stood disabled.
func decideRecount(job CronJob, results []wire.Result, corrected bool) (int, autoDisableStep) {
	failures, disable := CountFailures(results, job.MaxFailures)
	return failures, decideAutoDisable(job, disable, corrected && failures < job.ConsecutiveFailures)
}

// applyAutoDisable carries out a trip or a lift (decideRecount).
func applyAutoDisable(ctx context.Context, tx pgx.Tx, job CronJob, step autoDisableStep, failures int) (CronJob, error) {
	if step == tripAutoDisable {
		return autoDisable(ctx, tx, job.ID, failures)
	}
	return liftAutoDisabled(ctx, tx, job.ID, failures)
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
	// By key, the key's slot names the month (runKeyWhere); an id alone
	// is looked up in every month's primary key.
	where, args := "id = $2", []any{id}
	if id == 0 {
		where, args = runKeyWhere("", runKey, 2)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+runDetailColumns+` FROM cron_job_runs
		WHERE cron_job_id = $1 AND `+where, append([]any{jobID}, args...)...)
	if err != nil {
		return RunDetail{}, fmt.Errorf("get run: %w", err)
	}
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[RunDetail])
	return run, notFound(err, "get run")
}
