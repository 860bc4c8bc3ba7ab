package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

func TestRunKeyWhereNamesTheKeysSlot(t *testing.T) {
	const job = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, key string
		slot      bool // the condition names scheduled_at
	}{
		{"scheduled (and catch-up)", runkey.Scheduled(job, slot), true},
		{"backfill", runkey.Backfill(job, slot, "r1"), true},
		{"retry", runkey.Retry(job, slot, 2), true},
		{"manual: its record's slot is the request's time", runkey.Manual(job, "4711"), false},
		{"not a key", "garbage", false},
	} {
		cond, args := runKeyWhere("r.", tc.key, 3)
		identity := "r.cron_job_id = run_key_job($3) AND r.key_trigger = run_key_trigger($3)" +
			" AND r.key_request = run_key_request($3) AND r.attempt = run_key_attempt($3)"
		want, wantArgs := identity, []any{tc.key}
		if tc.slot {
			want, wantArgs = identity+" AND r.scheduled_at = $4", []any{tc.key, slot}
		}
		if cond != want || len(args) != len(wantArgs) || args[0] != wantArgs[0] ||
			(tc.slot && !args[1].(time.Time).Equal(slot)) {
			t.Errorf("%s: runKeyWhere = %q %v, want %q %v", tc.name, cond, args, want, wantArgs)
		}
	}
}

func TestOutcomeSlotMustBeTheKeys(t *testing.T) {
	const job = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		o    Outcome
		ok   bool
	}{
		{"scheduled at its slot", Outcome{RunKey: runkey.Scheduled(job, slot), ScheduledAt: slot}, true},
		{"same instant in another zone", Outcome{RunKey: runkey.Scheduled(job, slot), ScheduledAt: slot.In(time.FixedZone("x", 3600))}, true},
		{"scheduled a second off", Outcome{RunKey: runkey.Scheduled(job, slot), ScheduledAt: slot.Add(time.Second)}, false},
		{"retry off its slot", Outcome{RunKey: runkey.Retry(job, slot, 2), ScheduledAt: slot.Add(time.Minute)}, false},
		{"backfill off its slot", Outcome{RunKey: runkey.Backfill(job, slot, "r1"), ScheduledAt: slot.Add(-time.Hour)}, false},
		{"manual at any time", Outcome{RunKey: runkey.Manual(job, "4711"), ScheduledAt: slot.Add(time.Hour)}, true},
	} {
		if err := outcomeSlotMismatch(tc.o); (err == nil) != tc.ok {
			t.Errorf("%s: outcomeSlotMismatch = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// The counter joins the last-run UPDATE: one statement for the job's row.
func TestOutcomeJobWriteOneStatement(t *testing.T) {
	at := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	id := int64(7)
	next := LastRuns{lastRunID: &id, LastRunAt: &at}
	three := 3
	sql, args := outcomeJobWrite("j", next, true, sweepMove{}, &three)
	if want := "UPDATE cron_jobs SET last_run_id = $2, last_run_at = $3, last_result = $4, last_failure_reason = $5, last_success_at = $6, consecutive_failures = $7 WHERE id = $1"; sql != want || args[6] != 3 {
		t.Errorf("outcomeJobWrite = %q %v, want %q", sql, args, want)
	}
	sql, args = outcomeJobWrite("j", next, false, sweepMove{}, &three)
	if want := "UPDATE cron_jobs SET consecutive_failures = $2 WHERE id = $1"; sql != want || args[1] != 3 {
		t.Errorf("counter alone: %q %v, want %q", sql, args, want)
	}
	if sql, _ := outcomeJobWrite("j", next, false, sweepMove{}, nil); sql != "" {
		t.Errorf("nothing changed: %q, want no statement", sql)
	}
}
