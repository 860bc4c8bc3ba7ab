package store

import (
	"fmt"
	"strconv"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// Run history is partitioned by month of scheduled_at (migration 027) and
// its unique key is a run's identity (migration 029): the job, the key's
// trigger, request and attempt, and scheduled_at, columns the database
// computes from the run key. A lookup by key
// alone probes the identity index of every month (the default partition,
// the months of the retention and those ahead), one that also names
// scheduled_at probes one month's. Every key that names a slot
// (scheduled, catch-up, backfill, retry) has its record at that slot: the
// outcome and start endpoints refuse any other scheduled_at
// (api.checkOutcome), so does recording an outcome (outcomeSlotMismatch),
// and the sweeper writes the key's slot. So a lookup by such a key names
// its slot. A manual key names none: its record's scheduled_at is the
// request's time its report carries, so it is looked up by key alone, in
// every month, which also holds a manual key to one row whatever time a
// report carries.

// keySlot is the slot a run key names; false for a manual key (and for a
// key that does not parse, which the API refuses).
func keySlot(runKey string) (time.Time, bool) {
	k, err := runkey.Parse(runKey)
	if err != nil || k.Slot.IsZero() {
		return time.Time{}, false
	}
	return k.Slot, true
}

// runKeyWhere is the condition that selects the record of runKey in
// cron_job_runs (columns qualified by prefix, e.g. "r." or ""), its
// placeholders numbered from first: the identity the key names (its job,
// trigger, request and attempt, as runkey reads it) and, when the key
// names one, its slot (one partition), last. args are the values in
// placeholder order. The values are computed here, not by the database's
// run_key_* functions from the key: a lookup by plain columns plans in
// less than half the time (docs/benchmarks.md, "Run identity by
// columns"), and an outcome plans its lookup every time. A key that does
// not parse names no run: attempt 0, which no record has.
func runKeyWhere(prefix, runKey string, first int) (cond string, args []any) {
	k := keyIdentity(runKey)
	n := func(i int) string { return "$" + strconv.Itoa(first+i) }
	cond = prefix + "cron_job_id = " + n(0) + " AND " + prefix + "key_trigger = " + n(1) +
		" AND " + prefix + "key_request = " + n(2) + " AND " + prefix + "attempt = " + n(3)
	args = []any{k.JobID, string(k.Trigger), k.Request, k.AttemptNumber()}
	if k.Slot.IsZero() {
		return cond, args
	}
	return cond + " AND " + prefix + "scheduled_at = " + n(4), append(args, k.Slot)
}

// keyIdentity is the run key as runKeyWhere looks it up: parsed, or, for
// a key that does not parse, one that names no run (the nil job, a retry's
// attempt 0).
func keyIdentity(runKey string) runkey.Key {
	k, err := runkey.Parse(runKey)
	if err != nil {
		return runkey.Key{JobID: "00000000-0000-0000-0000-000000000000", Trigger: wire.TriggerRetry, Attempt: 0}
	}
	return k
}

// runIdentity is the condition that a row of cron_job_runs (columns
// qualified by prefix) has the identity of the run key in the SQL
// expression key (a column of another row: a lookup by a key's value is
// runKeyWhere's), of the job in the expression job, but for the slot:
// the identity key (cron_job_runs_identity) but its last column, computed
// from the key by the database's run_key_* functions, which read a key as
// the row's own columns do. The slot is not among them (a scheduled key's
// is its slot), so every caller adds it: the slot the key names
// (scheduled_at = …), or none for a manual key, which names none
// (runningWhere, which cannot tell, asks both ways).
func runIdentity(prefix, key, job string) string {
	return prefix + "cron_job_id = " + job +
		" AND " + prefix + "key_trigger = run_key_trigger(" + key + ")" +
		" AND " + prefix + "key_request = run_key_request(" + key + ")" +
		" AND " + prefix + "attempt = run_key_attempt(" + key + ")"
}

// outcomeSlotMismatch refuses an outcome whose scheduled_at is not the
// slot its run key names: its record would sit at another slot than the
// one every lookup by its key names, and a second report could then be
// recorded a second time. The API refuses such an outcome first (400);
// this keeps the store's own invariant.
func outcomeSlotMismatch(o Outcome) error {
	slot, ok := keySlot(o.RunKey)
	if !ok || slot.Equal(o.ScheduledAt) {
		return nil
	}
	return fmt.Errorf("outcome: scheduled_at %s is not the slot of run key %s", o.ScheduledAt.UTC().Format(time.RFC3339Nano), o.RunKey)
}
