package schedule

import (
	"testing"
	"time"
)

func TestShortestGap(t *testing.T) {
	from := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr, tz string
		want     time.Duration
	}{
		{"* * * * *", "UTC", time.Minute},
		{"*/5 * * * *", "UTC", 5 * time.Minute},
		{"0,1 3 * * *", "UTC", time.Minute},
		{"0 3 * * *", "UTC", 24 * time.Hour},           // not the expression's finest step (an hour)
		{"0 3,4 * * *", "UTC", time.Hour},              // two hours in a row
		{"0 23 * * 1", "UTC", 7 * 24 * time.Hour},      // weekly
		{"55 23 * * *", "UTC", 24 * time.Hour},         // across midnight
		{"59 23 31 12 *", "UTC", 365 * 24 * time.Hour}, // yearly
		{"0 0 1 1 *", "UTC", 365 * 24 * time.Hour},
		// A schedule whose first fire is years away is measured there:
		// every minute of 29 February (from 2026: 2028), and of a Sunday
		// 29 February (2032).
		{"* * 29 2 *", "UTC", time.Minute},
		{"*/2 * 29 2 *", "UTC", 2 * time.Minute},
		{"* * 29 2 */7", "UTC", time.Minute},
		// 23:00 on 29 February and 00:00 on 1 March: an hour apart once in
		// four years.
		{"0 0,23 1,29 2,3 *", "UTC", time.Hour},
		// Lord Howe Island moves its clocks by 30 minutes: 01:45 and 02:45
		// on its spring-forward night (4 October 2026) are 30 minutes
		// apart, 01:50 and 02:30 ten.
		{"45 * * * *", "Australia/Lord_Howe", 30 * time.Minute},
		{"30,50 * * * *", "Australia/Lord_Howe", 10 * time.Minute},
		// The day-of-month OR day-of-week rule: the 1st or any Monday, so
		// Monday 31 August 2026 and Tuesday 1 September are a day apart.
		{"0 0 1 * 1", "UTC", 24 * time.Hour},
		// The spring-forward day in Berlin (29 March 2026) is 23 hours long.
		{"30 3 * * *", "Europe/Berlin", 23 * time.Hour},
	} {
		if got := mustParse(t, c.expr, c.tz).ShortestGap(from); got != c.want {
			t.Errorf("%q in %s: gap %v, want %v", c.expr, c.tz, got, c.want)
		}
	}
}
