package schedule

import (
	"testing"
	"time"
)

// TestFirstInstantFallBack: Europe/Berlin falls back at 03:00 CEST on
// 2026-10-25 (01:00 UTC); 02:00–03:00 local happens twice.
func TestFirstInstantFallBack(t *testing.T) {
	s, err := Parse("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	utc := func(h, m int) time.Time { return time.Date(2026, 10, 25, h, m, 0, 0, time.UTC) }
	for _, tt := range []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"first pass 02:30 CEST stays", utc(0, 30), utc(0, 30)},
		{"second pass 02:30 CET maps to the first", utc(1, 30), utc(0, 30)},
		{"second pass 02:00 CET maps to 02:00 CEST", utc(1, 0), utc(0, 0)},
		{"03:00 CET exists once", utc(2, 0), utc(2, 0)},
		{"01:59 CEST exists once", utc(23, 59).AddDate(0, 0, -1), utc(23, 59).AddDate(0, 0, -1)},
		{"an ordinary day", time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC)},
		{"spring forward 03:30 CEST", time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)},
	} {
		if got := s.FirstInstant(tt.in); !got.Equal(tt.want) {
			t.Errorf("%s: FirstInstant(%v) = %v, want %v", tt.name, tt.in, got.UTC(), tt.want)
		}
	}
	// A timer re-armed in the second pass fires at 02:30 CET; the slot it
	// names is the first-pass instant, which the stamp already holds.
	if slot := s.FirstInstant(s.Prev(utc(1, 30))); !slot.Equal(utc(0, 30)) {
		t.Errorf("second-pass fire names slot %v, want %v", slot.UTC(), utc(0, 30))
	}
}
