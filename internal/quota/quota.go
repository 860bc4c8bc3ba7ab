// Package quota decides whether a tenant's cron job fits the tenant's
// limits: how many jobs, how often they may fire, how long and how large
// a run may be. Defaults come from the core's config; an admin may set
// any of them per tenant. Deciding is pure; the store counts jobs under
// the tenant's row lock.
package quota

import (
	"fmt"
	"math"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
)

// Limits are the limits in force for a tenant. A zero field is no limit,
// except MaxJobs, which never exceeds MaxJobsCeiling.
type Limits struct {
	MaxJobs            int `json:"max_jobs"`
	MinIntervalSeconds int `json:"min_interval_seconds"`
	MaxTimeoutSeconds  int `json:"max_timeout_seconds"`
	MaxMemoryMB        int `json:"max_memory_mb"`
	// RunNowPerMinute bounds a tenant's run-now and backfill requests: up
	// to this many at once, and this many a minute after (RunNowBucket).
	RunNowPerMinute int `json:"run_now_per_minute"`
}

// MaxValue bounds every limit (a year in seconds, a TiB in MiB, a
// million jobs, half a million run-nows a second): anything larger is a
// typo, not a plan.
const MaxValue = 1 << 25

// Overrides are an admin's per-tenant settings; nil keeps the default.
type Overrides struct {
	MaxJobs            *int `json:"max_jobs"`
	MinIntervalSeconds *int `json:"min_interval_seconds"`
	MaxTimeoutSeconds  *int `json:"max_timeout_seconds"`
	MaxMemoryMB        *int `json:"max_memory_mb"`
	RunNowPerMinute    *int `json:"run_now_per_minute"`
}

// Apply lays the overrides over the defaults.
func (o Overrides) Apply(d Limits) Limits {
	pick := func(v *int, def int) int {
		if v != nil {
			return *v
		}
		return def
	}
	return Limits{
		MaxJobs:            pick(o.MaxJobs, d.MaxJobs),
		MinIntervalSeconds: pick(o.MinIntervalSeconds, d.MinIntervalSeconds),
		MaxTimeoutSeconds:  pick(o.MaxTimeoutSeconds, d.MaxTimeoutSeconds),
		MaxMemoryMB:        pick(o.MaxMemoryMB, d.MaxMemoryMB),
		RunNowPerMinute:    pick(o.RunNowPerMinute, d.RunNowPerMinute),
	}
}

// Exceeded names the limit a job is over; the API answers it with 422.
type Exceeded struct {
	Field string // the job field that is over (schedule, timeout_seconds, ...)
	Limit string // the limit's name (min_interval_seconds, ...)
	Msg   string
}

func (e *Exceeded) Error() string { return e.Msg }

// Job is what the limits look at.
type Job struct {
	Schedule       *schedule.Schedule
	TimeoutSeconds int
	MaxMemoryMB    int
}

// Changed says which of a job's fields a request sets. An update is held
// only to the limits of what it changes, so lowering a tenant's limits
// does not block an unrelated edit of a job made under the old ones.
type Changed struct{ Schedule, Timeout, Memory bool }

// All is a create: every field is new.
var All = Changed{true, true, true}

// Check returns the first limit j is over among the changed fields, or nil.
// now anchors the search for the schedule's shortest gap.
func Check(l Limits, j Job, changed Changed, now time.Time) *Exceeded {
	if changed.Timeout && l.MaxTimeoutSeconds > 0 && j.TimeoutSeconds > l.MaxTimeoutSeconds {
		return &Exceeded{"timeout_seconds", "max_timeout_seconds",
			fmt.Sprintf("timeout_seconds: %d is above the tenant's limit of %d (max_timeout_seconds)", j.TimeoutSeconds, l.MaxTimeoutSeconds)}
	}
	if changed.Memory && l.MaxMemoryMB > 0 && j.MaxMemoryMB > l.MaxMemoryMB {
		return &Exceeded{"max_memory_mb", "max_memory_mb",
			fmt.Sprintf("max_memory_mb: %d is above the tenant's limit of %d (max_memory_mb)", j.MaxMemoryMB, l.MaxMemoryMB)}
	}
	if changed.Schedule && l.MinIntervalSeconds > 0 && j.Schedule != nil {
		min := time.Duration(l.MinIntervalSeconds) * time.Second
		if gap := j.Schedule.ShortestGap(now); gap < min {
			return &Exceeded{"schedule", "min_interval_seconds",
				fmt.Sprintf("schedule: fires as little as %s apart, more often than the tenant's limit of once every %s (min_interval_seconds)",
					gap, min)}
		}
	}
	return nil
}

// MaxJobsCeiling is the most jobs any tenant may have, whatever its
// quota says (0, "no limit", means this). The node's tombstones of
// deleted jobs are bounded per tenant at twice it
// (unitmgr.MaxTombstonesPerTenant), which is what keeps a late message
// from reinstalling a deleted job; more jobs per tenant would outrun them.
const MaxJobsCeiling = 1000

// JobCount checks a create against MaxJobs given the jobs the tenant has.
func JobCount(l Limits, have int) *Exceeded {
	limit := l.MaxJobs
	if limit <= 0 || limit > MaxJobsCeiling {
		limit = MaxJobsCeiling
	}
	if have >= limit {
		return &Exceeded{"max_jobs", "max_jobs",
			fmt.Sprintf("the tenant has %d cron jobs, its limit (max_jobs); delete one first", have)}
	}
	return nil
}

// RunNowBucket is what a tenant has left of RunNowPerMinute: a token
// bucket that holds up to the limit and refills at the limit a minute,
// as of At. A run-now or a backfill queues a run on every node of the
// shard and a workflow in Temporal, whatever the job's schedule allows,
// so this is what stops one tenant's script from flooding both.
type RunNowBucket struct {
	Tokens float64
	At     time.Time
}

// Throttled refuses a run-now or backfill: the tenant used up its
// RunNowPerMinute; one more request fits after Wait. The API answers 429.
type Throttled struct {
	Limit int
	Wait  time.Duration
}

func (e *Throttled) Error() string {
	return fmt.Sprintf("run-now: the tenant's run-now and backfill requests are used up (run_now_per_minute: %d at once, then %d a minute); retry in %s",
		e.Limit, e.Limit, e.Wait.Round(100*time.Millisecond))
}

// tokenSlack absorbs the rounding of a refill computed in float64 seconds:
// a request made exactly Wait after a refusal finds 0.9999999999999999
// tokens, and is the one the refusal promised.
const tokenSlack = 1e-9

// TakeRunNow decides one run-now or backfill request against a bucket
// with perMinute in force (0: no limit): the bucket after taking a token, or
// Throttled when less than one is there (the bucket is then unchanged:
// the caller stores nothing). A lowered limit caps what was left.
// Choice: a clock that went back (now before At) gives a full bucket.
// Otherwise the refill would wait until the clock caught up with At, and
// a refused request stores nothing that could restart it; the tenant
// gains at most one burst per step back of the database's clock.
func TakeRunNow(perMinute int, b RunNowBucket, now time.Time) (RunNowBucket, *Throttled) {
	if perMinute <= 0 {
		return b, nil // no limit
	}
	limit := float64(perMinute)
	perSecond := limit / 60
	tokens := b.Tokens
	switch elapsed := now.Sub(b.At); {
	case elapsed < 0:
		tokens = limit
	default:
		tokens += elapsed.Seconds() * perSecond
	}
	tokens = min(tokens, limit)
	if tokens < 1-tokenSlack {
		wait := time.Duration(math.Ceil((1 - tokens) / perSecond * float64(time.Second)))
		return b, &Throttled{Limit: perMinute, Wait: wait}
	}
	return RunNowBucket{Tokens: max(tokens-1, 0), At: now}, nil
}
