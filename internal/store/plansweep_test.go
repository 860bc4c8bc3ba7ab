package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
)

func TestPlanSweep(t *testing.T) {
	minutely := mustSchedule(t, "* * * * *")
	hourly := mustSchedule(t, "0 * * * *")
	never := func(time.Time) time.Time { return time.Time{} }
	now := time.Date(2026, 11, 22, 10, 20, 10, 0, time.UTC)
	const timeout, grace = time.Minute, 2 * time.Minute
	cutoff := now.Add(-timeout - grace) // 10:17:10
	at := func(hm string) time.Time {
		t.Helper()
		v, err := time.Parse("15:04:05", hm)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2026, 11, 22, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
	}
	for _, tc := range []struct {
		name      string
		next      func(time.Time) time.Time
		from      time.Time
		max       int
		slots     []time.Time
		sweptTo   time.Time
		dueAt     time.Time // zero: nil
		dueAtOnce bool      // due again at this very now
	}{
		{"caught up: nothing due, stands at the cutoff, due when the next slot ends",
			minutely.Next, at("10:17:05"), 500, nil, cutoff, at("10:19:00"), false},
		{"one slot ended grace ago",
			minutely.Next, at("10:16:30"), 500, []time.Time{at("10:17:00")}, cutoff, at("10:19:00"), false},
		{"a slot exactly at the cutoff is due",
			minutely.Next, at("10:16:10"), 500, []time.Time{at("10:17:00")}, cutoff, at("10:19:00"), false},
		{"several slots",
			minutely.Next, at("10:13:59"), 500, []time.Time{at("10:14:00"), at("10:15:00"), at("10:16:00"), at("10:17:00")}, cutoff, at("10:19:00"), false},
		{"the from slot itself was swept before",
			minutely.Next, at("10:16:00"), 500, []time.Time{at("10:17:00")}, cutoff, at("10:19:00"), false},
		{"from after the cutoff (not_before ahead of the sweep's clock): stays there",
			minutely.Next, at("10:19:30"), 500, nil, at("10:19:30"), at("10:21:00"), false},
		{"hourly, nothing due for most of an hour",
			hourly.Next, at("10:00:30"), 500, nil, cutoff, at("11:01:00"), false},
		{"hourly, its slot due",
			hourly.Next, at("09:40:00"), 500, []time.Time{at("10:00:00")}, cutoff, at("11:01:00"), false},
		{"a backlog past max: stands at the last slot taken, due at once",
			minutely.Next, at("10:10:30"), 3, []time.Time{at("10:11:00"), at("10:12:00"), at("10:13:00")}, at("10:13:00"), at("10:15:00"), true},
		{"max slots taken and one more due: due at once",
			minutely.Next, at("10:13:30"), 3, []time.Time{at("10:14:00"), at("10:15:00"), at("10:16:00")}, at("10:16:00"), at("10:18:00"), true},
		{"exactly max slots due: caught up",
			minutely.Next, at("10:13:30"), 4, []time.Time{at("10:14:00"), at("10:15:00"), at("10:16:00"), at("10:17:00")}, cutoff, at("10:19:00"), false},
		{"a schedule that fires no more: never due",
			never, at("10:00:00"), 500, nil, cutoff, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planSweep(tc.next, tc.from, timeout, now, grace, tc.max)
			if len(got.Slots) != len(tc.slots) {
				t.Fatalf("slots %v, want %v", got.Slots, tc.slots)
			}
			for i := range got.Slots {
				if !got.Slots[i].Equal(tc.slots[i]) {
					t.Fatalf("slots %v, want %v", got.Slots, tc.slots)
				}
			}
			if !got.SweptUntil.Equal(tc.sweptTo) {
				t.Errorf("swept until %v, want %v", got.SweptUntil, tc.sweptTo)
			}
			switch {
			case tc.dueAt.IsZero() && got.DueAt != nil:
				t.Errorf("due at %v, want never", *got.DueAt)
			case !tc.dueAt.IsZero() && (got.DueAt == nil || !got.DueAt.Equal(tc.dueAt)):
				t.Errorf("due at %v, want %v", got.DueAt, tc.dueAt)
			}
			// The pass selects a job when sweep_due_at <= now - grace: a
			// job is selected again at once exactly when slots are left.
			if got.DueAt != nil && !got.DueAt.After(now.Add(-grace)) != tc.dueAtOnce {
				t.Errorf("due again at once: %v, want %v", !tc.dueAtOnce, tc.dueAtOnce)
			}
		})
	}
}

// Whatever the clock and the start, planning again at the same now from
// where a plan left the sweep takes no slot twice and skips none, and a
// job is selected again (due) exactly when the first plan left slots.
func TestPlanSweepResumes(t *testing.T) {
	const timeout, grace = 90 * time.Second, time.Minute
	for _, expr := range []string{"* * * * *", "*/7 * * * *", "30 2 * * *"} {
		s := mustSchedule(t, expr)
		from := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
		for _, now := range []time.Time{from.Add(3 * time.Minute), from.Add(time.Hour), from.Add(50 * time.Hour)} {
			var all []time.Time
			at := from
			for i := 0; ; i++ {
				step := planSweep(s.Next, at, timeout, now, grace, 5)
				all = append(all, step.Slots...)
				at = step.SweptUntil
				if step.DueAt == nil || step.DueAt.After(now.Add(-grace)) {
					break
				}
				if i > 1000 {
					t.Fatalf("%s: never caught up", expr)
				}
			}
			want := s.NextN(from, 5000)
			n := 0
			for n < len(want) && !want[n].Add(timeout).After(now.Add(-grace)) {
				n++
			}
			if len(all) != n {
				t.Fatalf("%s at %v: %d slots, want %d", expr, now, len(all), n)
			}
			for i := range all {
				if !all[i].Equal(want[i]) {
					t.Fatalf("%s at %v: slot %d is %v, want %v", expr, now, i, all[i], want[i])
				}
			}
		}
	}
}

func mustSchedule(t *testing.T, expr string) *schedule.Schedule {
	t.Helper()
	s, err := schedule.ParseWithSeconds(expr, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
