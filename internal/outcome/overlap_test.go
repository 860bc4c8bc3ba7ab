package outcome

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestClassifyOverlapPolicies: what the runner records under an overlap
// policy becomes the right result: a command stopped by the next slot
// (cancel_previous) is cancelled unless it had succeeded, a command the
// runner stopped at the timeout is a timeout, and a runner killed while
// it waited for the previous run is a platform error (which the real
// run's result replaces), never the tenant's signal.
func TestClassifyOverlapPolicies(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 1, 30, 0, time.UTC)
	slot := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	next := slot.Add(time.Minute)
	started := slot.Add(time.Second)
	one := 1
	ran := func(edit func(r *runner.Record)) runner.Record {
		r := runner.Record{Kind: runner.KindRan, RunKey: "k", Slot: slot, StartedAt: &started}
		edit(&r)
		return r
	}
	for _, tt := range []struct {
		name string
		svc  Service
		rec  runner.Record
		want wire.Result
	}{
		{"superseded, killed by the stop", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "143"},
			ran(func(r *runner.Record) { r.Signal, r.SupersededBy = "SIGTERM", &next }), wire.ResultCancelled},
		{"superseded, exited non-zero after trapping it", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"},
			ran(func(r *runner.Record) { r.ExitCode, r.SupersededBy = &one, &next }), wire.ResultCancelled},
		{"superseded but it had succeeded", Service{Result: "success", ExitCode: "exited", ExitStatus: "0"},
			ran(func(r *runner.Record) { r.ExitCode, r.SupersededBy = new(int), &next }), wire.ResultSuccess},
		{"not superseded: a failure stays one", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "143"},
			ran(func(r *runner.Record) { r.Signal = "SIGTERM" }), wire.ResultSignal},
		// A stop that did not end the run (the command escaped it)
		// leaves systemd's timeout or OOM kill, never a cancel.
		{"superseded, but systemd's start timeout ended it", Service{Result: "timeout", ExitCode: "killed", ExitStatus: "TERM"},
			ran(func(r *runner.Record) { r.SupersededBy = &next }), wire.ResultTimeout},
		{"superseded, but the kernel's OOM kill ended it", Service{Result: "oom-kill", ExitCode: "killed", ExitStatus: "KILL"},
			ran(func(r *runner.Record) { r.Signal, r.SupersededBy = "SIGKILL", &next }), wire.ResultOOM},
		{"superseded, OOM kills in the cgroup", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "137", OOMKills: 1, LimitOOMs: 1},
			ran(func(r *runner.Record) { r.Signal, r.SupersededBy = "SIGKILL", &next }), wire.ResultOOM},
		{"superseded and timed out (a rewrite: the runner records one)", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "143"},
			ran(func(r *runner.Record) { r.Signal, r.TimedOut, r.SupersededBy = "SIGTERM", true, &next }), wire.ResultTimeout},
		{"timed out by the runner", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "143"},
			ran(func(r *runner.Record) { r.Signal, r.TimedOut = "SIGTERM", true }), wire.ResultTimeout},
		{"waiter killed", Service{Result: "signal", ExitCode: "killed", ExitStatus: "KILL"},
			runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot, Node: "n2", Waiting: true}, wire.ResultPlatformError},
		{"a started runner killed, not waiting: as before", Service{Result: "signal", ExitCode: "killed", ExitStatus: "KILL"},
			runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot}, wire.ResultSignal},
		{"waiter gave up: overlap_skipped", Service{Result: "success", ExitCode: "exited", ExitStatus: "75"},
			runner.Record{Kind: runner.KindOverlap, RunKey: "k", Slot: slot, Reason: "gave up waiting"}, wire.ResultOverlapSkipped},
	} {
		r, silent := Classify(tt.svc, tt.rec, true, now)
		if silent || r.Result != tt.want {
			t.Errorf("%s: %+v (silent %v), want %s", tt.name, r, silent, tt.want)
		}
	}
}

// TestValidateSuperseded: a record may say the next slot stopped it only
// for a run of a cancel_previous spec, naming a fire time after its slot
// and not in the future: a tenant's rewrite cannot make another job's, or
// another policy's, failure read as cancelled.
func TestValidateSuperseded(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 7, 30, 0, time.UTC)
	for _, tt := range []struct {
		name   string
		policy wire.OverlapPolicy
		by     func(slot time.Time) time.Time
		kind   string
		ok     bool
	}{
		{"the next slot, still in the future", wire.OverlapCancelPrevious, func(s time.Time) time.Time { return s.Add(5 * time.Minute) }, runner.KindRan, false},
		{"a past fire time after the slot", wire.OverlapCancelPrevious, func(s time.Time) time.Time { return s.Add(-5 * time.Minute) }, runner.KindRan, false},
		{"skip policy", wire.OverlapSkip, func(s time.Time) time.Time { return s.Add(5 * time.Minute) }, runner.KindRan, false},
		{"not a fire time", wire.OverlapCancelPrevious, func(s time.Time) time.Time { return s.Add(time.Minute) }, runner.KindRan, false},
		{"on a record that is no run", wire.OverlapCancelPrevious, func(s time.Time) time.Time { return s.Add(5 * time.Minute) }, runner.KindOverlap, false},
	} {
		rec, want := validRecord(now)
		want.Specs[0].OverlapPolicy = tt.policy
		by := tt.by(rec.Slot)
		rec.SupersededBy, rec.Kind = &by, tt.kind
		if err := ValidateRecord(rec, want); (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	// The valid case: the run of slot S was stopped when S+5m came, which
	// lies before now.
	now = now.Add(5 * time.Minute)
	rec, want := validRecord(now)
	rec.Slot = rec.Slot.Add(-5 * time.Minute)
	rec.RunKey = runkey.Scheduled(jobA, rec.Slot)
	want.Specs[0].OverlapPolicy = wire.OverlapCancelPrevious
	by := rec.Slot.Add(5 * time.Minute)
	rec.SupersededBy = &by
	if err := ValidateRecord(rec, want); err != nil {
		t.Errorf("a run superseded by the next slot: %v", err)
	}
}

// TestSupersededByOnlyJustAhead: the hook runs on the runner's node, on
// its clock, right after the runner stopped its command when the next
// slot came: superseded_by may lie at most SupersedeSkew ahead of the
// hook's now. A tenant's rewrite naming the next slot a minute or two
// ahead (FutureSkew) would relabel its failure cancelled for a stop that
// never happened.
func TestSupersededByOnlyJustAhead(t *testing.T) {
	next := time.Date(2026, 11, 21, 12, 10, 0, 0, time.UTC) // the slot after 12:05 (*/5)
	for _, tt := range []struct {
		name  string
		ahead time.Duration // of next over the hook's now
		ok    bool
	}{
		{"came a while ago", -time.Minute, true},
		{"came just now", 0, true},
		{"the hook's clock a few seconds behind the runner's stop", 3 * time.Second, true},
		{"at the bound", SupersedeSkew, true},
		{"just over the bound", SupersedeSkew + time.Second, false},
		{"90 s ahead: no stop yet", 90 * time.Second, false},
	} {
		now := next.Add(-tt.ahead)
		if tt.ahead < 0 {
			now = next.Add(time.Second) // still the run of 12:05 that the stop ended
		}
		rec, want := validRecord(now)
		rec.Slot = time.Date(2026, 11, 21, 12, 5, 0, 0, time.UTC)
		rec.RunKey = runkey.Scheduled(jobA, rec.Slot)
		started, finished := rec.Slot.Add(3*time.Second), now
		rec.StartedAt, rec.FinishedAt = &started, &finished
		want.Specs[0].OverlapPolicy = wire.OverlapCancelPrevious
		by := next
		rec.SupersededBy = &by
		if err := ValidateRecord(rec, want); (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestMaxRunAgeCoversTheLongestRun: the hook accepts the record of the
// longest run a job can have: a catch-up started a whole window late,
// that waited its longest for the previous run (buffer_one), and ran its
// whole timeout, then systemd's stop and the hook; and the agent keeps a
// replaced spec longer than that.
func TestMaxRunAgeCoversTheLongestRun(t *testing.T) {
	const maxTimeoutSec = 86400                      // the API's bound on timeout_seconds
	const stopAndHook = 10*time.Second + time.Minute // TimeoutStopSec, and the hook's own time, generously
	longest := time.Duration(wire.MaxCatchUpWindowSec+
		jobspec.StartWaitSec(wire.OverlapBufferOne, wire.MaxCatchUpWindowSec, maxTimeoutSec)+maxTimeoutSec)*time.Second + stopAndHook
	if MaxRunAge < longest {
		t.Errorf("MaxRunAge %s refuses a run that reports %s after its slot", MaxRunAge, longest)
	}
	if jobspec.KeepPrevious <= MaxRunAge {
		t.Errorf("KeepPrevious %s not longer than MaxRunAge %s", jobspec.KeepPrevious, MaxRunAge)
	}
	now := time.Date(2026, 11, 21, 12, 7, 30, 0, time.UTC)
	rec, want := validRecord(now.Add(-longest))
	want.Now = now
	started, finished := rec.Slot.Add(longest-stopAndHook-time.Duration(maxTimeoutSec)*time.Second), now.Add(-stopAndHook)
	rec.StartedAt, rec.FinishedAt = &started, &finished
	if err := ValidateRecord(rec, want); err != nil {
		t.Errorf("the longest run's record refused: %v", err)
	}
}
