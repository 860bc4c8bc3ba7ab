package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

func TestRunKeyWhereNamesTheKeysSlot(t *testing.T) {
	const job = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	const identity = "r.cron_job_id = $3 AND r.key_trigger = $4 AND r.key_request = $5 AND r.attempt = $6"
	for _, tc := range []struct {
		name, key string
		want      string
		args      []any
	}{
		{"scheduled (and catch-up)", runkey.Scheduled(job, slot), identity + " AND r.scheduled_at = $7",
			[]any{job, "scheduled", "", 1, slot}},
		{"backfill", runkey.Backfill(job, slot, "r1"), identity + " AND r.scheduled_at = $7",
			[]any{job, "backfill", "r1", 1, slot}},
		{"retry", runkey.Retry(job, slot, 2), identity + " AND r.scheduled_at = $7", []any{job, "retry", "", 2, slot}},
		{"manual: its record's slot is the request's time", runkey.Manual(job, "4711"), identity,
			[]any{job, "manual", "4711", 1}},
		{"not a key: attempt 0, which no record has", "garbage", identity,
			[]any{"00000000-0000-0000-0000-000000000000", "retry", "", 0}},
	} {
		cond, args := runKeyWhere("r.", tc.key, 3)
		if cond != tc.want || fmt.Sprint(args) != fmt.Sprint(tc.args) {
			t.Errorf("%s: runKeyWhere = %q %v, want %q %v", tc.name, cond, args, tc.want, tc.args)
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
