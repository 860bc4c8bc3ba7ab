package schedule

import (
	"testing"
	"time"
)

func TestGaps(t *testing.T) {
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		expr, tz string
		from, to time.Time
		want     []string
	}{
		// Berlin springs forward at 01:00 UTC on 29 March 2026 (02:00 -> 03:00).
		{"30 2 * * *", "Europe/Berlin", day(2026, 3, 28), day(2026, 3, 31), []string{"2026-03-29T02:30"}},
		{"30 2 * * *", "Europe/Berlin", day(2026, 3, 30), day(2026, 4, 30), nil},
		{"30 2 * * *", "Europe/Berlin", day(2026, 10, 1), day(2026, 11, 1), nil}, // fall back repeats, no gap
		{"30 3 * * *", "Europe/Berlin", day(2026, 3, 28), day(2026, 3, 31), nil},
		{"30 2 * * *", "UTC", day(2026, 3, 28), day(2026, 3, 31), nil},
		// Every 20 minutes: three wall times in the hour that does not exist.
		{"*/20 * * * *", "Europe/Berlin", day(2026, 3, 29), day(2026, 3, 30),
			[]string{"2026-03-29T02:00", "2026-03-29T02:20", "2026-03-29T02:40"}},
		// The change lies outside [from, to): not listed.
		{"30 2 * * *", "Europe/Berlin", time.Date(2026, 3, 29, 1, 0, 1, 0, time.UTC), day(2026, 3, 31), nil},
		{"30 2 * * *", "Europe/Berlin", day(2026, 3, 28), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC), nil},
	} {
		s, err := Parse(tc.expr, tc.tz)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range s.Gaps(tc.from, tc.to) {
			got = append(got, g.Wall)
			if want := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC); !g.At.Equal(want) {
				t.Errorf("%s %s: gap at %v, want %v", tc.expr, tc.tz, g.At, want)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s in %s [%v, %v): gaps %v, want %v", tc.expr, tc.tz, tc.from, tc.to, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s in %s: gaps %v, want %v", tc.expr, tc.tz, got, tc.want)
			}
		}
	}
}
