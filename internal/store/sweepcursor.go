package store

import (
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// Moving the lost-run sweep's cursor when an outcome arrives (issue 16).
//
// A sweep pass writes every due job's swept_until and sweep_due_at. In
// the steady state every slot was reported, and that write is all the
// pass does: for 100,000 every-minute jobs, 100,000 row updates a minute
// that record nothing. The outcome of a job's next slot after the cursor
// already holds the job's row lock and writes its run, so it moves the
// cursor over that slot itself, in the same transaction: the pass then
// finds the job not due. It writes what the sweep would have: the slot
// has a record now (the sweep keeps any record under the slot's run key),
// so the sweep would pass it without recording it lost.

// sweepMove is what recording an outcome writes of the job's sweep
// cursor. sweptUntil nil: nothing. exact: sweep_due_at is written too
// (dueAt; nil when the schedule fires no more), as planSweep would store
// it; otherwise the trigger of migration 011 bounds it from below.
type sweepMove struct {
	sweptUntil *time.Time
	exact      bool
	dueAt      *time.Time
}

// sweepCursorJob is what the cursor decision reads of a job (its row
// locked by the outcome's transaction).
type sweepCursorJob struct {
	swept     *time.Time // swept_until
	notBefore time.Time
	sweeping  bool // enabled and active or failed: the sweep looks at it
	// next is the job's current schedule's next fire time after a time
	// (nil: the stored schedule does not parse); horizon is sweepHorizon.
	next    func(time.Time) time.Time
	horizon time.Duration
}

// advanceSweepCursor decides whether an outcome recorded under runKey for
// jobID moves the job's sweep cursor: only when the key is the scheduled
// key (a scheduled run or its catch-up) of exactly the next slot of the
// current schedule after where the sweep stands (sweepFrom: swept_until,
// never before not_before). Then no slot lies unreported between the
// cursor and that slot, and the cursor moves to the slot; sweep_due_at
// becomes the end of the slot after it (slot + horizon), as planSweep
// would store it. It never moves the cursor:
//   - for a sweep not started (swept_until NULL: sweepAfterOutcome's), a
//     job the sweep does not look at, or a schedule that does not parse;
//   - for a manual, backfill or retry key (not a slot the sweep checks);
//   - for a slot at or before the cursor (a late outcome, one replacing a
//     lost record the sweep wrote): never backwards;
//   - for a slot after the next one (the one between may still be lost).
//
// The outcome's version does not matter: the sweep checks the current
// schedule's slots by run key, whichever version's run holds it.
func advanceSweepCursor(j sweepCursorJob, jobID, runKey string) (sweepMove, bool) {
	if j.swept == nil || !j.sweeping || j.next == nil {
		return sweepMove{}, false
	}
	k, err := runkey.Parse(runKey)
	if err != nil || k.Trigger != wire.TriggerScheduled || k.JobID != jobID {
		return sweepMove{}, false
	}
	from, _ := sweepFrom(j.swept, wire.StatusActive, time.Time{}, j.notBefore, false)
	if slot := j.next(from); slot.IsZero() || !slot.Equal(k.Slot) {
		return sweepMove{}, false
	}
	at := k.Slot
	move := sweepMove{sweptUntil: &at, exact: true}
	if after := j.next(at); !after.IsZero() {
		due := after.Add(j.horizon)
		move.dueAt = &due
	}
	return move, true
}

// sweepMoveAfterOutcome is what recording o writes of its job's sweep
// (the job's row locked; swept its swept_until, now the transaction's
// clock): the start of a sweep not started (sweepAfterOutcome, swept_until
// alone: the trigger bounds sweep_due_at), or the cursor moved over o's
// slot (advanceSweepCursor), or nothing.
func sweepMoveAfterOutcome(job CronJob, swept *time.Time, o Outcome, now time.Time) sweepMove {
	if start := sweepAfterOutcome(swept, o.Version, job.Version, evidenceAt(o, now), now); start != swept {
		return sweepMove{sweptUntil: start}
	}
	sweeping := job.Enabled && (job.Status == wire.StatusActive || job.Status == wire.StatusFailed)
	if swept == nil || !sweeping {
		return sweepMove{} // before parsing the schedule: most outcomes of such jobs stop here
	}
	cur := sweepCursorJob{swept: swept, notBefore: job.NotBefore, sweeping: sweeping,
		horizon: sweepHorizon(job.TimeoutSeconds, job.CatchUpWindowSeconds, job.OverlapPolicy)}
	if s, err := schedule.ParseWithSeconds(job.Schedule, job.Timezone); err == nil {
		cur.next = s.Next
	}
	mv, _ := advanceSweepCursor(cur, job.ID, o.RunKey)
	return mv
}
