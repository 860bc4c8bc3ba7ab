package runner

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// The pure decisions of the overlap policies (docs/semantics.md,
// "Overlap policies").

func TestOverlapAction(t *testing.T) {
	slot := decision{Trigger: wire.TriggerScheduled}
	manual := decision{Trigger: wire.TriggerManual}
	late := decision{Trigger: wire.TriggerScheduled, AfterOverrun: true}
	for _, tt := range []struct {
		name   string
		policy wire.OverlapPolicy
		d      decision
		want   overlapAct
	}{
		{"absent policy (older core) skips", "", slot, actSkip},
		{"skip skips", wire.OverlapSkip, slot, actSkip},
		{"buffer_one waits", wire.OverlapBufferOne, slot, actWait},
		{"cancel_previous waits for the stopped run", wire.OverlapCancelPrevious, slot, actWait},
		{"a run-now request never waits here (the agent waits for it)", wire.OverlapBufferOne, manual, actSkip},
		{"a late start after an overrun never waits", wire.OverlapBufferOne, late, actSkip},
	} {
		if got := overlapAction(tt.policy, tt.d); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestWaitDeadline(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 11, 21, h, m, s, 0, time.UTC) }
	for _, tt := range []struct {
		name       string
		slot, next time.Time
		started    time.Time
		timeoutSec int
		want       time.Time
	}{
		{"minutely: gives up before the next slot's fire", at(12, 1, 0), at(12, 2, 0), at(12, 1, 3), 300, at(12, 1, 50)},
		{"daily: bounded by the previous run's longest life", at(12, 0, 0), at(12, 0, 0).Add(24 * time.Hour), at(12, 0, 3), 300,
			at(12, 0, 3).Add(300*time.Second + KillGrace + WaitSlack)},
		{"no later slot", at(12, 0, 0), time.Time{}, at(12, 0, 3), 60, at(12, 0, 3).Add(60*time.Second + KillGrace + WaitSlack)},
	} {
		if got := waitDeadline(tt.slot, tt.next, tt.started, tt.timeoutSec); !got.Equal(tt.want) {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestMaxWaitCoversThePreviousRun(t *testing.T) {
	// The wait must outlast the previous run (its timeout, the kill grace)
	// and a catch-up's spread, or a waiter gives up on a run that is
	// about to end.
	if got, floor := MaxWait(wire.OverlapBufferOne, 0, 300), 300*time.Second+KillGrace; got <= floor {
		t.Errorf("buffer_one wait %s, want above %s", got, floor)
	}
	if got := MaxWait(wire.OverlapSkip, 600, 300); got <= CatchUpSpread {
		t.Errorf("catch-up wait %s, want above the spread %s", got, CatchUpSpread)
	}
	if got := MaxWait("", 0, 300); got != 0 {
		t.Errorf("skip without catch-up waits %s, want 0 (TimeoutStartSec stays the timeout)", got)
	}
	// Everything a start may spend before and around its command fits in
	// the unit's start timeout beside the job's whole timeout: the
	// catch-up spread, the overlap wait, the election's stamp wait (5 s),
	// the kill grace at the timeout and the drain margin.
	for _, timeout := range []int{1, 60, 300, 86400} {
		before := CatchUpSpread + overlapWaitCap(timeout) + 5*time.Second + KillGrace + timeoutMargin
		for _, p := range []wire.OverlapPolicy{wire.OverlapBufferOne, wire.OverlapCancelPrevious} {
			if got := MaxWait(p, 3600, timeout); got < before {
				t.Errorf("%s, timeout %ds: start wait %s, want at least %s", p, timeout, got, before)
			}
		}
		if got, want := MaxWait(wire.OverlapSkip, 3600, timeout), CatchUpSpread+5*time.Second+KillGrace+timeoutMargin; got < want {
			t.Errorf("catch-up, timeout %ds: start wait %s, want at least %s", timeout, got, want)
		}
	}
}

func TestNextWaitStep(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 1, 30, 0, time.UTC)
	d := decision{Trigger: wire.TriggerScheduled, Slot: time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC), Key: "k-new"}
	prev := d.Slot.Add(-time.Minute)
	live := Stamp{Slot: prev, Holder: "node1", RunKey: "k-prev", Heartbeat: now.Add(-3 * time.Second)}
	deadline := now.Add(20 * time.Second)
	for _, tt := range []struct {
		name    string
		st      Stamp
		ok      bool
		now     time.Time
		stopped bool
		want    waitStep
	}{
		{"live holder, before the deadline", live, true, now, false, waitOn},
		{"another node's waiter took the slot", Stamp{Slot: d.Slot, Holder: "node3", RunKey: "k-new", Heartbeat: now}, true, now, false, waitCovered},
		{"holder stopped heart-beating", Stamp{Slot: prev, Holder: "node1", RunKey: "k-prev", Heartbeat: now.Add(-time.Minute)}, true, now, false, waitHolder},
		{"deadline", live, true, deadline, false, waitGiveUp},
		{"stopped wins over everything", Stamp{Slot: d.Slot}, true, deadline, true, waitStopped},
		{"a later slot stamped (the next slot ran): covered", Stamp{Slot: d.Slot.Add(time.Minute), Heartbeat: now}, true, now, false, waitCovered},
	} {
		if got := nextWaitStep(d, tt.st, tt.ok, tt.now, deadline, tt.stopped); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAfterOverrun(t *testing.T) {
	slot := time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC)
	d := decision{Trigger: wire.TriggerScheduled, Slot: slot, AfterOverrun: true}
	now := slot.Add(50 * time.Second)
	prev := slot.Add(-time.Minute)
	for _, tt := range []struct {
		name string
		st   Stamp
		ok   bool
		want bool
	}{
		{"previous run released just now, after the slot", Stamp{Slot: prev, Released: true, Heartbeat: now.Add(-time.Second)}, true, true},
		{"previous run ended before the slot (a restarted timer)", Stamp{Slot: prev, Released: true, Heartbeat: slot.Add(-time.Second)}, true, false},
		// The runner's drain, systemd's stop of leftovers (10 s) and the
		// outcome hook (5 s) come between the release and the queued
		// start: ~18 s and CephFS latency, past FireMargin's 20 s.
		{"released 30 s ago (drain, stop, hook)", Stamp{Slot: prev, Released: true, Heartbeat: now.Add(-30 * time.Second)}, true, true},
		{"released at the margin", Stamp{Slot: prev, Released: true, Heartbeat: now.Add(-AfterOverrunMargin)}, true, true},
		{"released long ago", Stamp{Slot: prev, Released: true, Heartbeat: now.Add(-AfterOverrunMargin - time.Second)}, true, false},
		{"not released: something else holds on", Stamp{Slot: prev, Heartbeat: now}, true, false},
		{"the slot itself is stamped", Stamp{Slot: slot, Released: true, Heartbeat: now}, true, false},
		{"no stamp", Stamp{}, false, false},
		{"release in this node's future", Stamp{Slot: prev, Released: true, Heartbeat: now.Add(time.Second)}, true, false},
	} {
		if got := afterOverrun(d, tt.st, tt.ok, now); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestSupersedeAt(t *testing.T) {
	sched, err := schedule.ParseWithSeconds("0 */5 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 11, 21, 12, 5, 0, 0, time.UTC)
	if got := supersedeAt(wire.OverlapCancelPrevious, sched, slot); !got.Equal(slot.Add(5 * time.Minute)) {
		t.Errorf("cancel_previous: %s, want the next slot", got)
	}
	// A run-now run (its slot is the request time) is stopped by the
	// first slot after it.
	if got := supersedeAt(wire.OverlapCancelPrevious, sched, slot.Add(90*time.Second)); !got.Equal(slot.Add(5 * time.Minute)) {
		t.Errorf("run-now: %s, want the next slot", got)
	}
	for _, p := range []wire.OverlapPolicy{"", wire.OverlapSkip, wire.OverlapBufferOne} {
		if got := supersedeAt(p, sched, slot); !got.IsZero() {
			t.Errorf("%q: %s, want never", p, got)
		}
	}
}

// TestDecideAfterOverrun: a late timer start of a buffer_one or
// cancel_previous job is a candidate for the slot an overrun held back;
// with skip (or a start not by the timer) it stays a late fire.
func TestDecideAfterOverrun(t *testing.T) {
	sched, err := schedule.ParseWithSeconds("0 * * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 12, 1, 40, 0, time.UTC)
	for _, tt := range []struct {
		policy wire.OverlapPolicy
		start  Start
		want   bool
	}{
		{wire.OverlapBufferOne, Start{ByTimer: true}, true},
		{wire.OverlapCancelPrevious, Start{ByTimer: true}, true},
		{wire.OverlapSkip, Start{ByTimer: true}, false},
		{"", Start{ByTimer: true}, false},
		{wire.OverlapBufferOne, Start{}, false},
	} {
		spec := jobspec.Spec{ID: id, OverlapPolicy: tt.policy}
		d := decideSlot(now, sched, spec, tt.start, nil)
		if d.AfterOverrun != tt.want || (tt.want && (d.Skip != "" || d.Key != id+"#scheduled#2026-11-21T12:01:00Z")) || (!tt.want && d.Skip != KindLateFire) {
			t.Errorf("%q %+v: %+v", tt.policy, tt.start, d)
		}
	}
}
