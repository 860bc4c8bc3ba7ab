package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// ErrInvalidSlot: a backfill named a slot that is not one of the job's
// past fire times it may re-run; the message says why (the API answers
// 400 naming "slot").
var ErrInvalidSlot = errors.New("invalid slot")

// backfillSlotError decides whether slot may be backfilled: it must be a
// fire time of the job's current schedule (as the runner names slots: the
// first instant of a repeated wall time), not in the future, not before
// the job was created and at most wire.MaxBackfillAge old. nil when it
// may.
func backfillSlotError(slot time.Time, sched *schedule.Schedule, created, now time.Time) error {
	at := slot.UTC().Format(time.RFC3339)
	switch {
	case slot.After(now):
		return fmt.Errorf("%s is in the future: only a past slot can be backfilled: %w", at, ErrInvalidSlot)
	case slot.Before(now.Add(-wire.MaxBackfillAge)):
		return fmt.Errorf("%s is more than %s old: %w", at, wire.MaxBackfillAge, ErrInvalidSlot)
	case slot.Before(created):
		return fmt.Errorf("%s is before the job was created (%s): %w", at, created.UTC().Format(time.RFC3339), ErrInvalidSlot)
	}
	prev := sched.Prev(slot)
	if prev.IsZero() || !sched.FirstInstant(prev).Equal(slot) {
		return fmt.Errorf("%s is not a fire time of the job's schedule %q: %w", at, sched.Expr(), ErrInvalidSlot)
	}
	return nil
}

// Backfill queues one run of a past slot of the job (trigger backfill) and
// returns its run key, runkey.Backfill(job, slot, request) with the
// request the outbox task id. It goes the way of a run-now (the task's
// run_key carries the slot to the nodes), so a slot can be backfilled
// again by another request; it never counts as the slot's scheduled run.
func (s *Store) Backfill(ctx context.Context, id string, ifVersion int64, slot time.Time) (CronJob, string, error) {
	// As RunNow: what the job could never take (a slot it has not)
	// answered first, the tenant's token in a transaction of its own.
	pre, err := peekRunnableJob(ctx, s.pool, id, ifVersion)
	if err != nil {
		return pre, "", err
	}
	if err := checkBackfillSlot(ctx, s.pool, pre, slot); err != nil {
		return pre, "", err
	}
	refund, err := s.takeRunNow(ctx, pre.TenantID)
	if err != nil {
		return pre, "", err
	}
	var job CronJob
	var key string
	ctx, woke := s.wakeAfterCommit(ctx)
	err = s.inTokenTx(ctx, refund, func(tx pgx.Tx) error {
		var err error
		if job, err = runnableJob(ctx, tx, id, ifVersion); err != nil {
			return err
		}
		if err := checkBackfillSlot(ctx, tx, job, slot); err != nil { // the schedule may have changed
			return err
		}
		request, err := queueTaskID(ctx, tx, id, wire.ActionRunNow, job.Version)
		if err != nil {
			return err
		}
		key = runkey.Backfill(id, slot, strconv.FormatInt(request, 10))
		if _, err := tx.Exec(ctx, `UPDATE cron_job_tasks SET run_key = $2 WHERE id = $1`, request, key); err != nil {
			return fmt.Errorf("backfill: %w", err)
		}
		return recordEvent(ctx, tx, job, actorOf(ctx), string(wire.ActionRunNow),
			map[string]any{"request": strconv.FormatInt(request, 10), "slot": slot.UTC().Format(time.RFC3339)})
	})
	woke(err)
	if err != nil {
		return job, "", err
	}
	return job, key, nil
}

// checkBackfillSlot refuses a slot the job cannot backfill
// (backfillSlotError), by the database's clock.
func checkBackfillSlot(ctx context.Context, q dbtx, job CronJob, slot time.Time) error {
	sched, err := schedule.Parse(job.Schedule, job.Timezone)
	if err != nil {
		return fmt.Errorf("backfill: the job's schedule: %w", err)
	}
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return fmt.Errorf("backfill: %w", err)
	}
	return backfillSlotError(slot, sched, job.CreatedAt, now)
}

// uncountedTriggers are runs that never count towards consecutive
// failures, either way: a backfill re-runs a past slot (after a fix, say),
// and in slot order its result would land amid old slots' results.
var uncountedTriggers = []wire.Trigger{wire.TriggerBackfill}

// evidenceAt is when a reported run shows a node had the job's schedule:
// its slot, except for a backfill, whose slot is a past one it re-ran on
// request (the node had the schedule now, not then).
func evidenceAt(o Outcome, now time.Time) time.Time {
	if k, err := runkey.Parse(o.RunKey); err == nil && k.Trigger == wire.TriggerBackfill {
		return now
	}
	return o.ScheduledAt
}
