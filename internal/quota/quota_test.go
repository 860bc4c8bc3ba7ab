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
	full := RunNowBucket{60, t0}
	for _, c := range []struct {
		name       string
		perMinute  int
		b          RunNowBucket
		now        time.Time
		wantTokens float64       // after the take
		wantWait   time.Duration // > 0: refused, the bucket unchanged
	}{
		{"full bucket", 60, full, t0, 59, 0},
		{"last token", 60, RunNowBucket{1, t0}, t0, 0, 0},
		{"empty: a token in a second", 60, RunNowBucket{0, t0}, t0, 0, time.Second},
		{"half refilled", 60, RunNowBucket{0.25, t0}, t0.Add(250 * time.Millisecond), 0, 500 * time.Millisecond},
		{"refilled by the time passed", 60, RunNowBucket{0, t0}, t0.Add(3 * time.Second), 2, 0},
		{"refill stops at the limit", 60, RunNowBucket{0, t0}, t0.Add(time.Hour), 59, 0},
		{"a lowered limit caps what was left", 6, full, t0, 5, 0},
		{"slow limit: 6 a minute waits 10 s", 6, RunNowBucket{0, t0}, t0, 0, 10 * time.Second},
		// Retrying exactly Wait after a refusal is taken, whatever the
		// float rounding of the refill (review s21a: 0.1 left at 9 a
		// minute came back as 0.99999999999999989 and was refused again).
		{"retry after exactly the wait, 9 a minute", 9, RunNowBucket{0.1, t0}, t0.Add(6 * time.Second), 0, 0},
		{"retry after exactly the wait, 18 a minute", 18, RunNowBucket{0.1, t0}, t0.Add(3 * time.Second), 0, 0},
		// The clock went back an hour: a full bucket, not one that stays
		// empty until the clock catches up with the last take.
		{"clock went back", 60, RunNowBucket{0, t0}, t0.Add(-time.Hour), 59, 0},
		{"no limit", 0, RunNowBucket{0, t0}, t0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, th := TakeRunNow(c.perMinute, c.b, c.now)
			if (th != nil) != (c.wantWait > 0) {
				t.Fatalf("throttled %v, want a wait of %s (0: a token taken)", th, c.wantWait)
			}
			if th != nil {
				if d := th.Wait - c.wantWait; d < 0 || d > time.Millisecond {
					t.Errorf("wait %s, want %s (rounded up, never short)", th.Wait, c.wantWait)
				}
				if got != c.b {
					t.Errorf("a refusal changed the bucket: %+v -> %+v", c.b, got)
				}
				return
			}
			want := RunNowBucket{c.wantTokens, c.now}
			if c.perMinute == 0 {
				want = c.b
			}
			if d := got.Tokens - want.Tokens; d < -1e-6 || d > 1e-6 || !got.At.Equal(want.At) {
				t.Errorf("bucket %+v, want %+v", got, want)
			}
		})
	}
}

// A burst takes the limit at once, and then a refill's worth: in a
// minute a tenant's script gets the limit twice at most. A request made
// exactly when a refusal said to come back is taken.
func TestTakeRunNowBurstThenRefill(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, perMinute := range []int{9, 18, 30, 60} {
		b := RunNowBucket{float64(perMinute), t0}
		taken := 0
		for now := t0; now.Before(t0.Add(time.Minute)); {
			next, th := TakeRunNow(perMinute, b, now)
			if th != nil {
				now = now.Add(th.Wait)
				if _, again := TakeRunNow(perMinute, b, now); again != nil {
					t.Fatalf("%d a minute: refused again (%v) exactly when told to come back", perMinute, again)
				}
				continue
			}
			b = next
			taken++
		}
		if taken < 2*perMinute-1 || taken > 2*perMinute {
			t.Errorf("%d requests in a minute under a limit of %d, want the burst and about the limit refilled", taken, perMinute)
		}
	}
}
