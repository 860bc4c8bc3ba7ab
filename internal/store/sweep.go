package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// maxLostPerSweep bounds the work one sweep does for one job.
const maxLostPerSweep = 500

// SweepReport tells what one sweep did.
type SweepReport struct {
	Lost int // lost runs recorded
	// LostByJob is Lost by job id (the sweeper's metrics count them by
	// shard).
	LostByJob map[string]int
	Skipped   []SkippedJob // jobs the sweep could not check
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
// never touch the failure counter. Each job is swept in a transaction of
// its own; a job whose schedule no longer parses, or whose row stays
// locked past lock_timeout (or a statement past statement_timeout), is
// skipped and reported (skipJob), not an end of the sweep.
func (s *Store) SweepLostRuns(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
	return Chores{s.pool}.SweepLostRuns(ctx, now, grace)
}

// SweepLostRuns is Store.SweepLostRuns on the chores' connection.
func (c Chores) SweepLostRuns(ctx context.Context, now time.Time, grace time.Duration) (SweepReport, error) {
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
		n, err := c.sweepJob(ctx, id, now, grace)
		if skipJob(ctx, err) {
			rep.Skipped = append(rep.Skipped, SkippedJob{ID: id, Err: err})
			continue
		}
		if err != nil {
			return rep, err
		}
		rep.Lost += n
		if n > 0 {
			if rep.LostByJob == nil {
				rep.LostByJob = map[string]int{}
			}
			rep.LostByJob[id] += n
		}
	}
	return rep, nil
}

// skipJob reports whether the sweep leaves a job out for err and goes on
// with the others: its stored schedule does not parse, or its row stayed
// locked past the session's lock_timeout (a long transaction of another
// replica) or a statement of it ran past statement_timeout. The job's
// own transaction was rolled back; the next sweep looks at it again. A
// cancelled or expired context is never a skip: it ends the sweep.
func skipJob(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	if errors.Is(err, errBadSchedule) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgLockNotAvailable || pe.Code == pgQueryCanceled)
}

// SQLSTATEs of a lock_timeout and of a statement_timeout.
const (
	pgLockNotAvailable = "55P03"
	pgQueryCanceled    = "57014"
)

// sweepJob records the lost slots of one job. Slots start where sweepFrom
// says (swept_until, set when a node first had the job's current schedule;
// NULL until then, and the job is not swept; never before not_before). A
// lost record is keyed by the slot's run key, so a slot has one row
// whatever the job's version, and a slot a node reported (or an earlier
// sweep recorded) is left alone.
func (c Chores) sweepJob(ctx context.Context, id string, now time.Time, grace time.Duration) (int, error) {
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
				ON CONFLICT (run_key) DO NOTHING`, pgx.NamedArgs{
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
// large backlog does not hold long locks. It returns how many it removed.
func (s *Store) DeleteRunsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	return Chores{s.pool}.DeleteRunsBefore(ctx, cutoff)
}

// DeleteRunsBefore is Store.DeleteRunsBefore on the chores' connection.
func (c Chores) DeleteRunsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := c.db.Exec(ctx, `DELETE FROM cron_job_runs WHERE id IN
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
