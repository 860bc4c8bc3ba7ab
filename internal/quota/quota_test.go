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

func TestTakeRunNow(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	l := Limits{RunNowPerMinute: 60} // a token a second
	for _, c := range []struct {
		name       string
		l          Limits
		b          RunNowBucket
		now        time.Time
		wantTokens float64 // after the take
		wantAt     time.Time
		wantWait   time.Duration // > 0: throttled
	}{
		{"full bucket", l, FullRunNowBucket(l, t0), t0, 59, t0, 0},
		{"last token", l, RunNowBucket{1, t0}, t0, 0, t0, 0},
		{"empty: a token in a second", l, RunNowBucket{0, t0}, t0, 0, t0, time.Second},
		{"half refilled", l, RunNowBucket{0.25, t0}, t0.Add(250 * time.Millisecond), 0.5, t0.Add(250 * time.Millisecond), 500 * time.Millisecond},
		{"refilled by the time passed", l, RunNowBucket{0, t0}, t0.Add(3 * time.Second), 2, t0.Add(3 * time.Second), 0},
		{"refill stops at the limit", l, RunNowBucket{0, t0}, t0.Add(time.Hour), 59, t0.Add(time.Hour), 0},
		{"a lowered limit caps what was left", Limits{RunNowPerMinute: 6}, RunNowBucket{60, t0}, t0, 5, t0, 0},
		{"slow limit: 6 a minute waits 10 s", Limits{RunNowPerMinute: 6}, RunNowBucket{0, t0}, t0, 0, t0, 10 * time.Second},
		// The clock went back an hour: nothing refills, and the refill
		// restarts from the new now instead of waiting an hour for At.
		{"clock went back", l, RunNowBucket{2, t0}, t0.Add(-time.Hour), 1, t0.Add(-time.Hour), 0},
		{"clock went back, empty", l, RunNowBucket{0, t0}, t0.Add(-time.Hour), 0, t0.Add(-time.Hour), time.Second},
		{"no limit", Limits{}, RunNowBucket{0, t0}, t0, 0, t0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, th := TakeRunNow(c.l, c.b, c.now)
			if (th != nil) != (c.wantWait > 0) {
				t.Fatalf("throttled %v, want a wait of %s (0: a token taken)", th, c.wantWait)
			}
			if th != nil {
				if d := th.Wait - c.wantWait; d < -time.Millisecond || d > time.Millisecond {
					t.Errorf("wait %s, want %s", th.Wait, c.wantWait)
				}
			}
			if d := got.Tokens - c.wantTokens; d < -1e-9 || d > 1e-9 || !got.At.Equal(c.wantAt) {
				t.Errorf("bucket %+v, want %v tokens at %s", got, c.wantTokens, c.wantAt)
			}
		})
	}
}

// A burst takes exactly the limit and then one a refill's worth: what a
// tenant's script gets in a minute is the limit twice at most.
func TestTakeRunNowBurstThenRefill(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	l := Limits{RunNowPerMinute: 30}
	b := FullRunNowBucket(l, t0)
	taken := 0
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(100 * time.Millisecond) {
		for {
			next, th := TakeRunNow(l, b, now)
			if th != nil {
				break
			}
			b = next
			taken++
		}
	}
	if taken < 59 || taken > 60 {
		t.Fatalf("%d requests in a minute under a limit of 30, want the 30 of the burst and about 30 refilled", taken)
	}
}
