package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
)

// The booted fault tier cannot skew one node's clock (docs/semantics.md,
// Clocks): these tests give each node its own clock instead.

// A node whose clock runs 90 s ahead fires every slot early and runs it
// then; the correct nodes find the slot stamped and stay silent. When its
// clock is stepped back, its timer fires the slots it already ran again,
// and the stamp keeps them from running twice. Each slot runs once, and
// the first slot after the step runs.
func TestNodeAheadThenSteppedBack(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 11, 21, h, m, s, 0, time.UTC) }
	const skew = 90 * time.Second
	env, _ := setupWith(t, `echo "$HOSTCRON_RUN_KEY" >> ran.log`, "0 * * * * *", at(12, 0, 2))
	node := func(name string, clock time.Time) Env { return otherNode(t, env, name, clock) }
	steps := []struct {
		who  Env
		runs bool
	}{
		{node("fast", at(11, 58, 32).Add(skew)), true}, // fast clock 12:00:02: runs 12:00, 90 s early
		{node("fast", at(11, 59, 32).Add(skew)), true}, // 12:01 early
		{node("node2", at(12, 0, 3)), false},           // 12:00 on time: stamped 12:01, silent
		{node("fast", at(12, 0, 32).Add(skew)), true},  // 12:02 early
		{node("fast", at(12, 1, 2)), false},            // stepped back: 12:01 again, stamped
		{node("node2", at(12, 1, 5)), false},           // 12:01 on time
		{node("fast", at(12, 2, 1)), false},            // 12:02 again
		{node("node2", at(12, 2, 4)), false},           // 12:02 on time
		{node("node2", at(12, 3, 4)), true},            // 12:03: nobody ran it early
		{node("fast", at(12, 3, 6)), false},            // and the fast node, correct now, finds it stamped
	}
	for i, s := range steps {
		code := Run(s.who)
		r := record(t, s.who)
		if got := r.Kind == KindRan; got != s.runs || (s.runs && code != 0) || (!s.runs && code != ExitSkip) {
			t.Fatalf("step %d (%s at %s): exit %d, record %+v; want ran=%v", i, s.who.Node, s.who.Now().Format(time.TimeOnly), code, r, s.runs)
		}
		if r.Warning != "" {
			t.Errorf("step %d: a stamp 90 s ahead is not corrupt (MaxSkew %s), got warning %q", i, MaxSkew, r.Warning)
		}
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran.log"))
	if err != nil {
		t.Fatal(err)
	}
	var slots []string
	for _, k := range strings.Fields(string(b)) {
		slots = append(slots, k[strings.LastIndexByte(k, '#')+1:])
	}
	if want := "2026-11-21T12:00:00Z 2026-11-21T12:01:00Z 2026-11-21T12:02:00Z 2026-11-21T12:03:00Z"; strings.Join(slots, " ") != want {
		t.Errorf("slots run %v, want each of %s once", slots, want)
	}
}

// A lease is judged by the reader's clock. A holder 90 s ahead looks alive
// (its heartbeat lies in the future): the slot behind it is an overlap. A
// holder 90 s behind looks dead although it beats every 5 s: the slot is
// reported as platform_error naming it, never run (the lock is held).
func TestLeaseOfASkewedHolder(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 13, 0, time.UTC)
	for _, tt := range []struct {
		name string
		beat time.Time // the holder's last heartbeat, by its own clock
		want string
	}{
		{"holder 90 s ahead", now.Add(90*time.Second - 2*time.Second), KindOverlap},
		{"holder 90 s behind", now.Add(-90*time.Second - 2*time.Second), KindPlatformError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, locks := setup(t, "touch ran")
			holdLock(t, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node3","run_key":"k","heartbeat":"`+tt.beat.Format(time.RFC3339)+`"}`)
			Run(env)
			if r := record(t, env); r.Kind != tt.want || ran(t, env) {
				t.Errorf("record %+v (ran %v), want %s and no run", r, ran(t, env), tt.want)
			}
		})
	}
}

// A node 11 minutes fast whose agent measures nothing (dead, or the core
// API unreachable from it) runs each slot 11 minutes early, and a correct
// node with a verified clock finds that node's stamp more than MaxSkew
// ahead and overwrites it to run its own slot. Without more, the fast
// node's slot would run again on time (12:11 at true 12:00 on the fast
// node, and at true 12:11 on the correct one). A writer that cannot vouch
// for its clock lists its slot in the stamp (Stamp.RanAhead), and so does
// a verified node that overwrites a runner's future stamp: every slot runs
// once, those the fast node ran early are not run again, and the correct
// node's slots run on time; also when the correct node joins only after
// the fast node ran several slots alone (their stamps superseded unseen).
func TestFastUnmeasuredNodeRunsEachSlotOnce(t *testing.T) {
	trueNoon := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	const skew = 11 * time.Minute
	const minutes = 14
	for _, joins := range []int{0, 4} { // the minute the correct node starts firing
		t.Run(fmt.Sprintf("correct node from minute %d", joins), func(t *testing.T) {
			env, locks := setupWith(t, `echo "$HOSTCRON_RUN_KEY" >> ran.log`, "0 * * * * *", trueNoon)
			for m := range minutes {
				minute := trueNoon.Add(time.Duration(m) * time.Minute)
				fast := otherNode(t, env, "fast", minute.Add(2*time.Second).Add(skew)) // no reading: unknown, runs
				if code := Run(fast); code != 0 && code != ExitSkip {
					t.Fatalf("true %s: fast node exit %d, record %+v", minute.Format(time.TimeOnly), code, record(t, fast))
				}
				if m < joins {
					continue
				}
				correct := withClock(t, otherNode(t, env, "node2", minute.Add(5*time.Second)), clockoffset.Reading{OffsetSeconds: 0.2, MeasuredAt: minute.Add(-25 * time.Second)})
				if code := Run(correct); code != 0 && code != ExitSkip {
					t.Fatalf("true %s: correct node exit %d, record %+v", minute.Format(time.TimeOnly), code, record(t, correct))
				}
			}
			b, err := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran.log"))
			if err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, k := range strings.Fields(string(b)) {
				count[k[strings.LastIndexByte(k, '#')+1:]]++
			}
			// Before the correct node joins, the slots before 12:11 ran on
			// the fast node 11 minutes before the test began (not simulated).
			for m := joins; m < minutes+11; m++ {
				slot := trueNoon.Add(time.Duration(m) * time.Minute).Format(time.RFC3339)
				if count[slot] != 1 {
					t.Errorf("slot %s ran %d times, want once (runs: %v)", slot, count[slot], count)
				}
			}
			if len(strings.Fields(string(b))) != minutes+11-joins {
				t.Errorf("runs %v: want each slot from minute %d once", count, joins)
			}
			st, _, _, err := readStamp(filepath.Join(locks, "cron-"+id+".slot"), trueNoon)
			if err != nil || len(st.RanAhead) != minutes {
				t.Errorf("stamp %+v (%v): want the %d slots the fast node ran", st, err, minutes)
			}
		})
	}
}

// A timer's fire of a slot that ran ahead of time on a fast node is no run
// of its own; a pending run-now request it falls back to still runs.
func TestRanAheadSlotFallsBackToARequest(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 11, 3, 0, time.UTC)
	env, locks := setupWith(t, `echo "$HOSTCRON_RUN_KEY" >> ran.log`, "0 * * * * *", now)
	st := Stamp{Slot: now.Add(11 * time.Minute).Truncate(time.Minute), Holder: "fast", RunKey: id + "#scheduled#2026-11-21T12:22:00Z", Released: true,
		RanAhead: []RanAhead{{Slot: time.Date(2026, 11, 21, 12, 11, 0, 0, time.UTC), Node: "fast"}}}
	if err := writeStamp(filepath.Join(locks, "cron-"+id+".slot"), st); err != nil {
		t.Fatal(err)
	}
	timer := env
	timer.Start = Start{ByTimer: true}
	if code := Run(timer); code != ExitSkip || record(t, timer).Kind != KindContention {
		t.Fatalf("timer fire of a slot that ran ahead: exit %d, record %+v", code, record(t, timer))
	}
	timer.ManualDir = t.TempDir()
	writeRequest(t, timer.ManualDir, "77", now.Add(-time.Second))
	timer = withClock(t, timer, clockoffset.Reading{MeasuredAt: now.Add(-30 * time.Second)})
	if code := Run(timer); code != 0 || record(t, timer).RunKey != id+"#manual#77" {
		t.Fatalf("with a request pending: exit %d, record %+v", code, record(t, timer))
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran.log"))
	if got := strings.TrimSpace(string(b)); got != id+"#manual#77" {
		t.Fatalf("runs %q: want the request only", got)
	}
}
