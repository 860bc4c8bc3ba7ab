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
