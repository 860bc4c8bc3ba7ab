package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// SlotRecords is what a job's slots are told from (slots.Classify does
// the telling): its scheduled runs in a range, its audit trail and where
// its lost-run sweep stands, read in one snapshot so they agree.
type SlotRecords struct {
	// Runs are the scheduled runs with a slot in [from, to), oldest
	// first, at most the limit asked for.
	Runs []Run
	// More: the range holds more runs than the limit.
	More bool
	// Events is the job's trail, oldest first, without run_now and
	// cancel (they change neither the schedule nor enabled).
	Events []JobEvent
	// SweptUntil is the last slot the sweep passed; nil when it has not
	// started (no node has the current schedule yet).
	SweptUntil *time.Time
}

// SlotRecords reads a job's records for its slots in [from, to).
func (s *Store) SlotRecords(ctx context.Context, jobID string, from, to time.Time, limit int) (SlotRecords, error) {
	var rec SlotRecords
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT swept_until FROM cron_jobs WHERE id = $1`, jobID).Scan(&rec.SweptUntil); err != nil {
			return notFound(err, "cron job")
		}
		var err error
		if rec.Runs, rec.More, err = slotRuns(ctx, tx, jobID, from, to, limit); err != nil {
			return err
		}
		rec.Events, err = trailForSlots(ctx, tx, jobID)
		return err
	})
	return rec, wrap(err, "slot records")
}

// slotRuns reads the scheduled runs (catch-ups included: same key) and
// their retries with a slot in [from, to), oldest first, then by record
// id, served by the (job, trigger, slot, id) index. A retry is recorded
// after the attempt it follows (a higher id), so the last run read of a
// slot is its last attempt, which slots.Classify takes as the slot's.
func slotRuns(ctx context.Context, tx pgx.Tx, jobID string, from, to time.Time, limit int) ([]Run, bool, error) {
	rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM cron_job_runs
		WHERE cron_job_id = $1 AND trigger = ANY($2::text[]) AND scheduled_at >= $3 AND scheduled_at < $4
		ORDER BY scheduled_at, id LIMIT $5`, jobID, []wire.Trigger{wire.TriggerScheduled, wire.TriggerCatchUp, wire.TriggerRetry}, from, to, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Run])
	if err != nil {
		return nil, false, fmt.Errorf("runs: %w", err)
	}
	runs, more := page(runs, limit)
	return runs, more, nil
}

// trailForSlots reads the job's trail oldest first, leaving out the
// actions that change neither its schedule nor whether it runs.
// maxSlotTrail bounds the audit events one slots request reads.
const maxSlotTrail = 10000

func trailForSlots(ctx context.Context, tx pgx.Tx, jobID string) ([]JobEvent, error) {
	// The newest maxSlotTrail events only: a job edited in a loop must not
	// make every slots request read its whole trail. Older state reads as
	// a pruned trail does (traced back from the job, else unknown).
	rows, err := tx.Query(ctx, `SELECT * FROM (
		SELECT id, at, actor, action, version, detail FROM cron_job_events
		WHERE cron_job_id = $1 AND action NOT IN ('run_now', 'cancel') ORDER BY id DESC LIMIT $2) newest
		ORDER BY id`, jobID, maxSlotTrail)
	if err != nil {
		return nil, fmt.Errorf("trail: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobEvent, error) {
		var e JobEvent
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Version, &e.Detail)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("trail: %w", err)
	}
	return events, nil
}
