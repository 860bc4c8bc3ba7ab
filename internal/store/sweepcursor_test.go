package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

func TestAdvanceSweepCursor(t *testing.T) {
	minutely := mustSchedule(t, "* * * * *")
	hourly := mustSchedule(t, "0 * * * *")
	const job = "0b5c9a3e-3c3f-4f7e-9a55-2f1d2b7f6a10"
	const other = "7d1e0c1a-0a3b-4c7e-8d2f-3b4a5c6d7e8f"
	const horizon = time.Minute
	at := func(hm string) time.Time {
		t.Helper()
		v, err := time.Parse("15:04:05", hm)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2026, 11, 22, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
	}
	ptr := func(v time.Time) *time.Time { return &v }
	for _, tc := range []struct {
		name      string
		job       sweepCursorJob
		key       string
		moved     bool
		sweptTo   time.Time
		dueAt     time.Time // zero: never (the schedule fires no more)
		wantMoved bool
	}{
		{name: "the next slot after the cursor: moves over it, due when the slot after it ends",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00")), wantMoved: true, sweptTo: at("10:18:00"), dueAt: at("10:20:00")},
		{name: "the cursor on a slot (moved by an outcome before): the slot after it",
			job: sweepCursorJob{swept: ptr(at("10:18:00")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:19:00")), wantMoved: true, sweptTo: at("10:19:00"), dueAt: at("10:21:00")},
		{name: "the horizon is the job's (timeout, catch-up window, overlap wait)",
			job: sweepCursorJob{swept: ptr(at("09:30:00")), sweeping: true, next: hourly.Next, horizon: 5 * time.Minute},
			key: runkey.Scheduled(job, at("10:00:00")), wantMoved: true, sweptTo: at("10:00:00"), dueAt: at("11:05:00")},
		{name: "a slot after the next one: the one between may be lost, stays",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:19:00"))},
		{name: "the slot at the cursor (a replacement of what the sweep recorded lost): never backwards",
			job: sweepCursorJob{swept: ptr(at("10:18:00")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00"))},
		{name: "a slot before the cursor (late): never backwards",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:15:00"))},
		{name: "not_before ahead of the cursor: the next slot after not_before",
			job: sweepCursorJob{swept: ptr(at("10:10:00")), notBefore: at("10:17:30"), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00")), wantMoved: true, sweptTo: at("10:18:00"), dueAt: at("10:20:00")},
		{name: "not_before ahead of the cursor: a slot before not_before is no slot of the sweep",
			job: sweepCursorJob{swept: ptr(at("10:10:00")), notBefore: at("10:17:30"), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:11:00"))},
		{name: "a slot not on the current schedule (an older version's): stays",
			job: sweepCursorJob{swept: ptr(at("09:30:00")), sweeping: true, next: hourly.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("09:31:00"))},
		{name: "sweep not started (swept_until NULL): sweepAfterOutcome's to start, not this",
			job: sweepCursorJob{sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00"))},
		{name: "a job the sweep does not look at (disabled, pending): stays",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: false, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00"))},
		{name: "a schedule that does not parse: stays",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, horizon: horizon},
			key: runkey.Scheduled(job, at("10:18:00"))},
		{name: "a manual run: not a slot the sweep checks",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Manual(job, "req-1")},
		{name: "a retry of the next slot: its first attempt holds the slot, not this key",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: job + "#retry#2026-11-22T10:18:00Z#2"},
		{name: "a backfill of the next slot: not the slot's run",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: job + "#backfill#2026-11-22T10:18:00Z#req-1"},
		{name: "another job's key: stays",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: runkey.Scheduled(other, at("10:18:00"))},
		{name: "a key that does not parse: stays",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, next: minutely.Next, horizon: horizon},
			key: "garbage"},
		{name: "the last slot of a schedule that fires no more: moves, never due again",
			job: sweepCursorJob{swept: ptr(at("10:17:10")), sweeping: true, horizon: horizon, next: func(t time.Time) time.Time {
				if last := at("10:18:00"); t.Before(last) {
					return last
				}
				return time.Time{}
			}},
			key: runkey.Scheduled(job, at("10:18:00")), wantMoved: true, sweptTo: at("10:18:00")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, moved := advanceSweepCursor(tc.job, job, tc.key)
			if moved != tc.wantMoved {
				t.Fatalf("moved %v, want %v (%+v)", moved, tc.wantMoved, got)
			}
			if !moved {
				if got.sweptUntil != nil {
					t.Fatalf("not moved but writes swept_until %v", *got.sweptUntil)
				}
				return
			}
			if got.sweptUntil == nil || !got.sweptUntil.Equal(tc.sweptTo) || !got.exact {
				t.Fatalf("swept until %v (exact %v), want %v", got.sweptUntil, got.exact, tc.sweptTo)
			}
			if !got.sweptUntil.After(*tc.job.swept) {
				t.Errorf("cursor %v not after %v", *got.sweptUntil, *tc.job.swept)
			}
			switch {
			case tc.dueAt.IsZero() && got.dueAt != nil:
				t.Errorf("due at %v, want never", *got.dueAt)
			case !tc.dueAt.IsZero() && (got.dueAt == nil || !got.dueAt.Equal(tc.dueAt)):
				t.Errorf("due at %v, want %v", got.dueAt, tc.dueAt)
			}
		})
	}
}

// A cursor the outcomes moved is where a sweep pass would have put it:
// planning from it takes exactly the slots a plan from the old cursor
// takes, less the reported ones (which the pass keeps anyway, their run
// key holding a record), and is due no later.
func TestAdvanceSweepCursorAgreesWithPlanSweep(t *testing.T) {
	const job = "0b5c9a3e-3c3f-4f7e-9a55-2f1d2b7f6a10"
	const timeout, grace = 90 * time.Second, time.Minute
	for _, expr := range []string{"* * * * *", "*/7 * * * *", "30 2 * * *"} {
		s := mustSchedule(t, expr)
		start := time.Date(2026, 3, 28, 23, 0, 30, 0, time.UTC)
		swept := start
		slots := s.NextN(start, 20)
		// Slots 0..9 reported in order (the cursor moves each time),
		// slot 10 never, slot 11 reported (the cursor stays before 10).
		for i := 0; i < 10; i++ {
			mv, ok := advanceSweepCursor(sweepCursorJob{swept: &swept, sweeping: true, next: s.Next, horizon: timeout},
				job, runkey.Scheduled(job, slots[i]))
			if !ok {
				t.Fatalf("%s: slot %d did not move the cursor", expr, i)
			}
			swept = *mv.sweptUntil
		}
		if _, ok := advanceSweepCursor(sweepCursorJob{swept: &swept, sweeping: true, next: s.Next, horizon: timeout},
			job, runkey.Scheduled(job, slots[11])); ok {
			t.Fatalf("%s: slot 11 moved the cursor over the unreported slot 10", expr)
		}
		now := slots[19].Add(timeout + grace)
		fromMoved := planSweep(s.Next, swept, timeout, now, grace, 500)
		fromStart := planSweep(s.Next, start, timeout, now, grace, 500)
		if len(fromStart.Slots)-len(fromMoved.Slots) != 10 || !fromMoved.Slots[0].Equal(slots[10]) {
			t.Fatalf("%s: from the moved cursor %v, from the start %v", expr, fromMoved.Slots, fromStart.Slots)
		}
		if !fromMoved.SweptUntil.Equal(fromStart.SweptUntil) {
			t.Errorf("%s: plans end at %v and %v", expr, fromMoved.SweptUntil, fromStart.SweptUntil)
		}
	}
}

// The outcome's write of the job row: the last run and the sweep's
// columns in one statement, each only when it changes.
func TestLastRunWrite(t *testing.T) {
	const job = "0b5c9a3e-3c3f-4f7e-9a55-2f1d2b7f6a10"
	at := time.Date(2026, 11, 22, 10, 18, 0, 0, time.UTC)
	due := at.Add(2 * time.Minute)
	for _, tc := range []struct {
		name    string
		changed bool
		sweep   sweepMove
		want    string
		args    int
	}{
		{"nothing", false, sweepMove{}, "", 0},
		{"last run only", true, sweepMove{},
			"UPDATE cron_jobs SET last_run_id = $2, last_run_at = $3, last_result = $4, last_failure_reason = $5, last_success_at = $6 WHERE id = $1", 6},
		{"a sweep started (the trigger bounds sweep_due_at)", false, sweepMove{sweptUntil: &at},
			"UPDATE cron_jobs SET swept_until = $2 WHERE id = $1", 2},
		{"the cursor moved, the last run unchanged (an older slot's success)", false, sweepMove{sweptUntil: &at, exact: true, dueAt: &due},
			"UPDATE cron_jobs SET swept_until = $2, sweep_due_at = $3 WHERE id = $1", 3},
		{"both: one statement", true, sweepMove{sweptUntil: &at, exact: true, dueAt: &due},
			"UPDATE cron_jobs SET last_run_id = $2, last_run_at = $3, last_result = $4, last_failure_reason = $5, last_success_at = $6, swept_until = $7, sweep_due_at = $8 WHERE id = $1", 8},
		{"the cursor moved past the schedule's last slot: sweep_due_at NULL", false, sweepMove{sweptUntil: &at, exact: true},
			"UPDATE cron_jobs SET swept_until = $2, sweep_due_at = $3 WHERE id = $1", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sql, args := lastRunWrite(job, LastRuns{}, tc.changed, tc.sweep)
			if sql != tc.want || len(args) != tc.args {
				t.Fatalf("%q with %d args, want %q with %d", sql, len(args), tc.want, tc.args)
			}
			if tc.sweep.exact && args[len(args)-1] != tc.sweep.dueAt {
				t.Errorf("sweep_due_at %v, want %v", args[len(args)-1], tc.sweep.dueAt)
			}
		})
	}
}
