package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// maxLostPerSweep bounds the work one sweep does for one job.
const maxLostPerSweep = 500

// sweepBatch is how many due jobs one transaction of a sweep claims and
// writes with one statement each (a variable so tests can make batches
// small).
var sweepBatch = 2000

// SweepReport tells what one sweep did.
type SweepReport struct {
	Lost int // lost runs recorded
	// LostByJob is Lost by job id (the sweeper's metrics count them by
	// shard).
	LostByJob map[string]int
	Skipped   []SkippedJob // jobs the sweep could not check
}

// addLost adds lost runs by job to the report.
func (r *SweepReport) addLost(byJob map[string]int) {
	for id, n := range byJob {
		if n == 0 {
			continue
		}
		if r.LostByJob == nil {
			r.LostByJob = map[string]int{}
		}
		r.LostByJob[id] += n
		r.Lost += n
	}
}

// SkippedJob is a job left out of a sweep, and why.
type SkippedJob struct {
	ID  string
	Err error
}

// errBadSchedule marks a job whose stored schedule no longer parses: the
// sweep skips it and goes on with the others.
var errBadSchedule = errors.New("stored schedule does not parse")

// SweepLostRuns records, for every active job (and every failed one: it
// still runs on the nodes that have it), each slot that ended more
// than timeout + grace ago and for which no node reported anything, as a
// "lost" run. A node that died mid-run never reports, so this is how such
// a run shows up in history. Lost runs are not the tenant's failures: they
// never touch the failure counter.
//
// A pass reads only the jobs that are due (sweep_due_at, indexed: the end
// of the next slot not yet swept, at least grace ago), in batches of
// sweepBatch. Each batch is one transaction: it claims its jobs (FOR
// UPDATE SKIP LOCKED), works out their slots in Go (planSweep), records
// the lost ones with one statement and moves every job's swept_until and
// sweep_due_at with another. A job whose schedule no longer parses is
// skipped and reported (skipJob), its row unchanged. A job the batch could
// not claim (another transaction holds its row) is swept on its own
// afterwards, waiting for the row up to lock_timeout, and skipped and
// reported if that passes; so is every job of a batch whose statements hit
// lock_timeout or statement_timeout.
func (s *Store) SweepLostRuns(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
	return Chores{s.pool}.SweepLostRuns(ctx, now, grace)
}

// SweepLostRuns is Store.SweepLostRuns on the chores' connection.
func (c Chores) SweepLostRuns(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
	var rep SweepReport
	p := newSweepPass(now, grace)
	// Keyset over the due index: jobs a batch swept are no longer due, the
	// ones it skipped stay behind the cursor until the next pass.
	var afterDue time.Time
	afterID := "00000000-0000-0000-0000-000000000000"
	for {
		rows, err := c.db.Query(ctx, `SELECT id, sweep_due_at FROM cron_jobs
			WHERE sweep_due_at <= $1 AND (sweep_due_at, id) > ($2, $3)
			ORDER BY sweep_due_at, id LIMIT $4`, p.dueBy, afterDue, afterID, sweepBatch)
		if err != nil {
			return rep, fmt.Errorf("sweep: list due jobs: %w", err)
		}
		var ids []string
		_, err = pgx.ForEachRow(rows, []any{&afterID, &afterDue}, func() error {
			ids = append(ids, afterID)
			return nil
		})
		if err != nil {
			return rep, fmt.Errorf("sweep: list due jobs: %w", err)
		}
		if len(ids) == 0 {
			return rep, nil
		}
		alone, err := c.sweepBatch(ctx, p, ids, &rep)
		if skipJob(ctx, err) {
			alone = ids // rolled back: each on its own, to find the one
		} else if err != nil {
			return rep, err
		}
		for _, id := range alone {
			n, err := c.sweepJob(ctx, p, id)
			if skipJob(ctx, err) {
				rep.Skipped = append(rep.Skipped, SkippedJob{ID: id, Err: err})
				continue
			}
			if err != nil {
				return rep, err
			}
			rep.addLost(map[string]int{id: n})
		}
		if len(ids) < sweepBatch {
			return rep, nil
		}
	}
}

// sweepBatch sweeps the jobs of ids it can claim in one transaction and
// returns the ones it could not (their rows locked by another
// transaction, or changed since they were listed) for sweepJob. rep gets
// the batch's lost runs and skipped jobs once it committed.
func (c Chores) sweepBatch(ctx context.Context, p *sweepPass, ids []string, rep *SweepReport) (alone []string, err error) {
	var lost map[string]int
	var skipped []SkippedJob
	err = pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+sweepColumns+` FROM cron_jobs j
			WHERE j.id = ANY($1::uuid[]) AND j.sweep_due_at <= $2 AND j.enabled AND j.status IN ($3, $4)
			FOR UPDATE OF j SKIP LOCKED`, ids, p.dueBy, wire.StatusActive, wire.StatusFailed)
		if err != nil {
			return fmt.Errorf("sweep: claim jobs: %w", err)
		}
		jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sweepJobRow, error) { return scanSweepJob(r) })
		if err != nil {
			return fmt.Errorf("sweep: claim jobs: %w", err)
		}
		claimed := make(map[string]bool, len(jobs))
		for _, j := range jobs {
			claimed[j.id] = true
		}
		alone = alone[:0]
		for _, id := range ids {
			if !claimed[id] {
				alone = append(alone, id)
			}
		}
		lost, skipped, err = p.write(ctx, tx, jobs)
		return err
	})
	if err != nil {
		return nil, err
	}
	rep.addLost(lost)
	rep.Skipped = append(rep.Skipped, skipped...)
	return alone, nil
}

// sweepJob sweeps one job in a transaction of its own, waiting for its row
// (up to the session's lock_timeout); a schedule that does not parse is an
// errBadSchedule error.
func (c Chores) sweepJob(ctx context.Context, p *sweepPass, id string) (int, error) {
	lost := 0
	err := pgx.BeginFunc(ctx, c.db, func(tx pgx.Tx) error {
		j, err := scanSweepJob(tx.QueryRow(ctx, `SELECT `+sweepColumns+` FROM cron_jobs j
			WHERE j.id = $1 AND j.enabled AND j.status IN ($2, $3) FOR UPDATE OF j`, id, wire.StatusActive, wire.StatusFailed))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // changed since listed; the next sweep looks again
		}
		if err != nil {
			// A lock timeout aborted the transaction: returning nil
			// would commit it (and fail). It is rolled back; skipJob
			// decides whether the sweep goes on.
			return fmt.Errorf("sweep %s: lock job: %w", id, err)
		}
		byJob, skipped, err := p.write(ctx, tx, []sweepJobRow{j})
		if err != nil {
			return err
		}
		if len(skipped) > 0 {
			return skipped[0].Err
		}
		lost = byJob[id]
		return nil
	})
	return lost, err
}

// skipJob reports whether the sweep leaves a job out for err and goes on
// with the others: its stored schedule does not parse, or its row stayed
// locked past the session's lock_timeout (a long transaction of another
// replica), a statement of it ran past statement_timeout, or PostgreSQL
// chose its transaction as a deadlock's victim (an outcome that wrote its
// run before locking the job). The job's own transaction was rolled back;
// the next sweep looks at it again. For a batch, the same errors mean:
// sweep its jobs one by one. A cancelled or expired context is never a
// skip: it ends the sweep.
func skipJob(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, errBadSchedule) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgLockNotAvailable || pe.Code == pgQueryCanceled || pe.Code == pgDeadlockDetected)
}

// SQLSTATEs of a lock_timeout, a statement_timeout and a deadlock.
const (
	pgLockNotAvailable = "55P03"
	pgQueryCanceled    = "57014"
	pgDeadlockDetected = "40P01"
)

// sweepJobRow is what the sweep reads of a job.
type sweepJobRow struct {
	id           string
	version      int64
	schedule     string
	timezone     string
	timeout      time.Duration // sweepHorizon: how long after its slot a run should have ended
	sweptUntil   *time.Time
	notBefore    time.Time
	verdictAt    time.Time // updated_at: for an active job, its provisioning verdict
	status       wire.Status
	shardHasNode bool // read only where sweepFrom needs it (swept_until NULL)
}

const sweepColumns = `j.id, j.version, j.schedule, j.timezone, j.timeout_seconds, j.catchup_window_seconds, j.overlap_policy, j.swept_until, j.not_before,
	j.updated_at, j.status, CASE WHEN j.swept_until IS NULL THEN EXISTS (SELECT 1 FROM tenants t
		JOIN nodes n ON n.shard_id = t.shard_id WHERE t.id = j.tenant_id AND NOT n.draining) ELSE false END`

func scanSweepJob(row pgx.Row) (sweepJobRow, error) {
	var j sweepJobRow
	var timeoutSeconds, catchUpWindowSeconds int
	var policy string
	err := row.Scan(&j.id, &j.version, &j.schedule, &j.timezone, &timeoutSeconds, &catchUpWindowSeconds, &policy, &j.sweptUntil, &j.notBefore,
		&j.verdictAt, &j.status, &j.shardHasNode)
	j.timeout = sweepHorizon(timeoutSeconds, catchUpWindowSeconds, wire.OverlapPolicy(policy))
	return j, err
}

// sweepHorizon is how long after its slot a slot's run should have ended
// (before the grace for its report): the timeout; for a job with a
// catch-up window, plus the window (its catch-up may start up to the
// window late; its spread wait is within the timeout); and for a
// buffer_one or cancel_previous job, plus the longest its start may wait
// for the previous run before its command starts (jobspec.StartWaitSec,
// the wait the unit's TimeoutStartSec allows beyond the timeout, which
// also holds the catch-up spread). A buffer_one slot that waited W and
// then ran D reports at slot + W + D: sweeping earlier would record a slot
// that ran as lost, and tell the operators (slots_unrun).
//
// Only this exact value, written by the sweep (planSweep), includes the
// wait: the trigger of migration 011 (cron_jobs_sweep_due_bound) keeps
// swept_until + timeout, a lower bound, so a job it touches is visited
// early, never late, and that visit stores this value.
func sweepHorizon(timeoutSeconds, catchUpWindowSeconds int, policy wire.OverlapPolicy) time.Duration {
	secs := timeoutSeconds + catchUpWindowSeconds
	if policy.OrSkip() != wire.OverlapSkip {
		secs += jobspec.StartWaitSec(policy, catchUpWindowSeconds, timeoutSeconds)
	}
	return time.Duration(secs) * time.Second
}

// sweepPass is one pass's clock and its parsed schedules (many jobs share
// one expression).
type sweepPass struct {
	now    time.Time
	grace  time.Duration
	dueBy  time.Time // a job is due when its sweep_due_at is at or before this
	reason string
	scheds map[[2]string]parsedSchedule
}

type parsedSchedule struct {
	s   *schedule.Schedule
	err error
}

func newSweepPass(now time.Time, grace time.Duration) *sweepPass {
	return &sweepPass{now: now, grace: grace, dueBy: now.Add(-grace), scheds: map[[2]string]parsedSchedule{},
		reason: fmt.Sprintf("no node reported an outcome within timeout + %s; the node running it may have died", grace)}
}

func (p *sweepPass) schedule(expr, tz string) (*schedule.Schedule, error) {
	k := [2]string{expr, tz}
	ps, ok := p.scheds[k]
	if !ok {
		ps.s, ps.err = schedule.ParseWithSeconds(expr, tz)
		p.scheds[k] = ps
	}
	return ps.s, ps.err
}

// lostRun is a lost record the sweep wrote.
type lostRun struct {
	JobID string
	ID    int64
}

// slotRecorded is true when slot u.scheduled_at of job u.cron_job_id has a
// record: the sweep's check before it writes a lost run. Every key the
// sweep writes is a scheduled one (runkey.Scheduled), whose identity is
// the job, 'scheduled', no request, attempt 1 and its slot.
const slotRecorded = `SELECT true FROM cron_job_runs r WHERE r.cron_job_id = u.cron_job_id AND r.key_trigger = 'scheduled'
	AND r.key_request = '' AND r.attempt = 1 AND r.scheduled_at = u.scheduled_at`

// write plans the sweep of jobs (their rows held by tx) and records it
// with two statements: the lost runs (a slot with a run of any kind, or an
// earlier lost record, keeps it: the run key is unique) and where each
// job's sweep stands. A job whose schedule does not parse is returned in
// skipped and left as it is.
func (p *sweepPass) write(ctx context.Context, tx pgx.Tx, jobs []sweepJobRow) (lost map[string]int, skipped []SkippedJob, err error) {
	var keys, runJobs, ids []string
	var versions []int64
	var slots, swept []time.Time
	var due []*time.Time
	for _, j := range jobs {
		from, ok := sweepFrom(j.sweptUntil, j.status, j.verdictAt, j.notBefore, j.shardHasNode)
		if !ok {
			continue // no node has the job's current schedule yet
		}
		sched, err := p.schedule(j.schedule, j.timezone)
		if err != nil {
			skipped = append(skipped, SkippedJob{ID: j.id, Err: fmt.Errorf("sweep %s: %w: %v", j.id, errBadSchedule, err)})
			continue
		}
		step := planSweep(sched.Next, from, j.timeout, p.now, p.grace, maxLostPerSweep)
		for _, slot := range step.Slots {
			keys = append(keys, runkey.Scheduled(j.id, slot))
			runJobs = append(runJobs, j.id)
			versions = append(versions, j.version)
			slots = append(slots, slot)
		}
		ids = append(ids, j.id)
		swept = append(swept, step.SweptUntil)
		due = append(due, step.DueAt)
	}
	if len(keys) > 0 {
		// RETURNING names the job of each row written (a slot with a run
		// writes none): the metrics count lost runs by shard. The
		// subquery leaves out the slots that have a record before they
		// reach the insert: ON CONFLICT alone runs the row's BEFORE
		// INSERT trigger and a speculative insertion for each (a quarter
		// of the statement's time when every slot was reported). It is a
		// scalar subquery, not NOT EXISTS, so that it stays one probe of
		// the identity index per slot, in the slot's partition only: an
		// anti-join may be planned as a scan of the whole history. ON
		// CONFLICT stays for a record committed after the statement's
		// snapshot.
		rows, err := tx.Query(ctx, `
			INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, failure_reason)
			SELECT u.run_key, u.cron_job_id, u.version, u.scheduled_at, $5, $6
			FROM unnest($1::text[], $2::uuid[], $3::bigint[], $4::timestamptz[]) AS u(run_key, cron_job_id, version, scheduled_at)
			WHERE (`+slotRecorded+`) IS NULL
			ON CONFLICT (cron_job_id, key_trigger, key_request, attempt, scheduled_at) DO NOTHING RETURNING cron_job_id::text, id`, keys, runJobs, versions, slots, wire.ResultLost, p.reason)
		if err != nil {
			return nil, nil, fmt.Errorf("sweep: record lost runs: %w", err)
		}
		written, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lostRun])
		if err != nil {
			return nil, nil, fmt.Errorf("sweep: record lost runs: %w", err)
		}
		var runIDs []int64
		var kinds []string
		for _, w := range written {
			if lost == nil {
				lost = map[string]int{}
			}
			lost[w.JobID]++
			runIDs, kinds = append(runIDs, w.ID), append(kinds, string(notify.Lost))
		}
		// Each lost run notifies, in the batch's transaction.
		if err := emitEvents(ctx, tx, runIDs, kinds); err != nil {
			return nil, nil, fmt.Errorf("sweep: %w", err)
		}
		// And the operator hears of them once per shard and window.
		if err := notifyUnrun(ctx, tx, lost); err != nil {
			return nil, nil, fmt.Errorf("sweep: %w", err)
		}
	}
	if len(ids) > 0 {
		_, err := tx.Exec(ctx, `UPDATE cron_jobs j SET swept_until = u.swept_until, sweep_due_at = u.due_at
			FROM unnest($1::uuid[], $2::timestamptz[], $3::timestamptz[]) AS u(id, swept_until, due_at)
			WHERE j.id = u.id AND j.id = ANY($1::uuid[])`, ids, swept, due) // the second: an index scan whatever the estimate
		if err != nil {
			return nil, nil, fmt.Errorf("sweep: advance: %w", err)
		}
	}
	return lost, skipped, nil
}

// sweepStep is the sweep of one job, decided.
type sweepStep struct {
	Slots      []time.Time // slots to record lost where nothing was reported
	SweptUntil time.Time   // where the sweep then stands
	// DueAt is when the next slot's run should have ended (slot +
	// timeout): the job is due again once that is a grace period ago.
	// nil: the schedule fires no more.
	DueAt *time.Time
}

// planSweep decides the sweep of a job whose schedule's next fire time
// after a time is next, swept from from (sweepFrom), at now: the slots
// after from whose run should have ended (slot + timeout) at least grace
// before now, at most max of them. Caught up, the sweep stands at the
// cutoff (now - timeout - grace), or at from if that is later, and is due
// when the first slot after that ends; otherwise it stands at the last
// slot taken and is due at once.
func planSweep(next func(time.Time) time.Time, from time.Time, timeout time.Duration, now time.Time, grace time.Duration, max int) sweepStep {
	cutoff := now.Add(-timeout - grace)
	var slots []time.Time
	at := from
	for {
		slot := next(at)
		if slot.IsZero() || slot.After(cutoff) {
			break // caught up
		}
		if len(slots) == max {
			due := slot.Add(timeout)
			return sweepStep{Slots: slots, SweptUntil: at, DueAt: &due}
		}
		slots = append(slots, slot)
		at = slot
	}
	if at.Before(cutoff) {
		at = cutoff
	}
	step := sweepStep{Slots: slots, SweptUntil: at}
	if slot := next(at); !slot.IsZero() {
		due := slot.Add(timeout)
		step.DueAt = &due
	}
	return step
}

// sweepFrom is where the sweep of a job looks for slots after (ok false:
// nowhere yet), from swept (swept_until), the job's status, when it last
// changed (updated_at: for an active job, its provisioning verdict), its
// not_before and whether its shard has a node that is not draining:
//   - a sweep that started goes on from where it stood;
//   - NULL means no node has the job's current schedule yet, and the job is
//     not swept; but an active job that is NULL was made active by a
//     replica from before NULL existed (a rolling deploy across migration
//     005: its verdict keeps a NULL it finds), which meant that every node
//     took it, so it is swept from that verdict, as that replica's own
//     rule had it; unless its shard has no node (nothing runs it). This
//     version never leaves an active job NULL (provisionedVerdict).
//
// Never before not_before: the runner refuses earlier slots.
func sweepFrom(swept *time.Time, status wire.Status, verdictAt, notBefore time.Time, shardHasNode bool) (time.Time, bool) {
	var from time.Time
	switch {
	case swept != nil:
		from = *swept
	case status == wire.StatusActive && shardHasNode:
		from = verdictAt
	default:
		return time.Time{}, false
	}
	if notBefore.After(from) {
		from = notBefore
	}
	return from, true
}

// DeleteRunsBefore removes run history older than cutoff, in batches so a
// large backlog does not hold long locks, then the tombstones of deleted
// jobs that no run is left of. It returns how many runs it removed.
func (s *Store) DeleteRunsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	return Chores{s.pool}.DeleteRunsBefore(ctx, cutoff)
}

// DeleteRunsBefore is Store.DeleteRunsBefore on the chores' connection.
func (c Chores) DeleteRunsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := c.deleteBatched(ctx, `DELETE FROM cron_job_runs WHERE id IN
		(SELECT id FROM cron_job_runs WHERE received_at < $1 LIMIT 5000)`, cutoff)
	if err != nil {
		return n, fmt.Errorf("delete old runs: %w", err)
	}
	_, err = c.pruneDeletedJobs(ctx, cutoff)
	return n, err
}

// deleteBatched runs a DELETE of at most 5,000 rows older than cutoff
// until it deletes fewer: short transactions, so retention never holds
// locks or bloats WAL in one go. It returns how many rows went.
func (c Chores) deleteBatched(ctx context.Context, sql string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := c.db.Exec(ctx, sql, cutoff)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < 5000 {
			return total, nil
		}
	}
}
