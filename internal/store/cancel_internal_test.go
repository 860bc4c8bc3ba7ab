package store

import (
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestCancellable(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)
	const timeout = 10 * time.Minute
	const job = "11111111-1111-1111-1111-111111111111"
	sched := func(at time.Time) runkey.Key { k, _ := runkey.Parse(runkey.Scheduled(job, at)); return k }
	manual, _ := runkey.Parse(runkey.Manual(job, "42"))
	res := func(r wire.Result) *string { s := string(r); return &s }
	var conflictErr *ConflictError
	for _, tc := range []struct {
		name      string
		key       runkey.Key
		recorded  *string
		requested bool
		want      string // "", "conflict" or "not found"
	}{
		{"a running slot (no record yet)", sched(now.Add(-30 * time.Second)), nil, false, ""},
		{"the slot of this very second", sched(now), nil, false, ""},
		{"a slot the sweeper called lost may still run", sched(now.Add(-20 * time.Minute)), res(wire.ResultLost), false, ""},
		{"a slot within its timeout and the reach", sched(now.Add(-(timeout + cancelReach))), nil, false, ""},
		{"a slot its timeout has stopped", sched(now.Add(-(timeout + cancelReach + time.Second))), nil, false, "conflict"},
		{"a lost slot its timeout has stopped", sched(now.Add(-(timeout + cancelReach + time.Second))), res(wire.ResultLost), false, "conflict"},
		{"a run-now key the core never spells", func() runkey.Key { k, _ := runkey.Parse(runkey.Manual(job, "042")); return k }(), nil, true, "not found"},
		{"a run that ended", sched(now.Add(-time.Minute)), res(wire.ResultSuccess), false, "conflict"},
		{"a run that failed", sched(now.Add(-time.Minute)), res(wire.ResultExitCode), false, "conflict"},
		{"a run already cancelled", sched(now.Add(-time.Minute)), res(wire.ResultCancelled), false, "conflict"},
		{"a future slot", sched(now.Add(time.Minute)), nil, false, "conflict"},
		{"a queued run-now", manual, nil, true, ""},
		{"a run-now that is no request of the job", manual, nil, false, "not found"},
		{"a run-now that ended", manual, res(wire.ResultSuccess), true, "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cancellable(tc.key, tc.recorded, tc.requested, now, int(timeout/time.Second))
			got := ""
			switch {
			case errors.As(err, &conflictErr):
				got = "conflict"
			case errors.Is(err, ErrNotFound):
				got = "not found"
			case err != nil:
				t.Fatalf("unexpected error %v", err)
			}
			if got != tc.want {
				t.Fatalf("cancellable = %q (%v), want %q", got, err, tc.want)
			}
		})
	}
}
