package quota

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
)

func sched(t *testing.T, expr, tz string) *schedule.Schedule {
	t.Helper()
	s, err := schedule.Parse(expr, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

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
		if got := ShortestGap(sched(t, c.expr, c.tz), from); got != c.want {
			t.Errorf("%q in %s: gap %v, want %v", c.expr, c.tz, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	now := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	l := Limits{MaxJobs: 10, MinIntervalSeconds: 300, MaxTimeoutSeconds: 3600, MaxMemoryMB: 512}
	every5 := sched(t, "*/5 * * * *", "UTC")
	every1 := sched(t, "* * * * *", "UTC")
	for _, c := range []struct {
		name    string
		l       Limits
		job     Job
		changed Changed
		limit   string // "" = fits
	}{
		{"fits", l, Job{every5, 3600, 512}, All, ""},
		{"timeout over", l, Job{every5, 3601, 512}, All, "max_timeout_seconds"},
		{"memory over", l, Job{every5, 60, 513}, All, "max_memory_mb"},
		{"too often", l, Job{every1, 60, 64}, All, "min_interval_seconds"},
		{"no limits", Limits{}, Job{every1, 86400, 1 << 20}, All, ""},
		// An update is held to what it changes: a command edit of a job
		// made under higher limits goes through.
		{"unchanged fields grandfathered", l, Job{every1, 7200, 1024}, Changed{}, ""},
		{"changed timeout only", l, Job{every1, 7200, 1024}, Changed{Timeout: true}, "max_timeout_seconds"},
		{"changed schedule only", l, Job{every1, 7200, 1024}, Changed{Schedule: true}, "min_interval_seconds"},
	} {
		got := Check(c.l, c.job, c.changed, now)
		switch {
		case c.limit == "" && got != nil:
			t.Errorf("%s: refused: %v", c.name, got)
		case c.limit != "" && (got == nil || got.Limit != c.limit):
			t.Errorf("%s: got %v, want the %s limit", c.name, got, c.limit)
		}
	}
}

func TestJobCountAndOverrides(t *testing.T) {
	defaults := Limits{MaxJobs: 100, MinIntervalSeconds: 60}
	five := 5
	zero := 0
	l := Overrides{MaxJobs: &five, MinIntervalSeconds: &zero}.Apply(defaults)
	if l.MaxJobs != 5 || l.MinIntervalSeconds != 0 {
		t.Fatalf("overrides not applied: %+v", l)
	}
	if e := JobCount(l, 4); e != nil {
		t.Errorf("4 of 5: %v", e)
	}
	if e := JobCount(l, 5); e == nil || e.Limit != "max_jobs" {
		t.Errorf("5 of 5: %v, want max_jobs", e)
	}
	// "No limit" and anything above it are the ceiling.
	for _, max := range []int{0, MaxJobsCeiling + 1} {
		if e := JobCount(Limits{MaxJobs: max}, MaxJobsCeiling); e == nil {
			t.Errorf("max_jobs %d let a tenant past the ceiling", max)
		}
	}
	if e := JobCount(Limits{}, MaxJobsCeiling-1); e != nil {
		t.Errorf("below the ceiling: %v", e)
	}
	if l := (Overrides{}).Apply(defaults); l != defaults {
		t.Errorf("no overrides changed the defaults: %+v", l)
	}
}
