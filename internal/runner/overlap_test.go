package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/wire"
)

// Real processes over one temp lock dir, each Env a node: the overlap
// policies keep every slot to one run, whoever waits, gives up, is
// stopped or dies.

// clock is a node's settable clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock { c := &clock{}; c.set(t); return c }
func (c *clock) set(t time.Time)  { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time   { return time.Unix(0, c.ns.Load()).UTC() }

// setupPolicy is setupWith for a minutely job (seconds field) with policy,
// whose command appends its slot to the webroot's "runs" and then sleeps
// while the file "hold-{slot}" exists, so a test decides how long each
// slot's run overruns.
func setupPolicy(t *testing.T, policy wire.OverlapPolicy, now time.Time) (Env, string) {
	env, locks := setupWith(t, `echo "$HOSTCRON_SLOT" >> runs; while [ -e "hold-$HOSTCRON_SLOT" ]; do sleep 0.05; done`, "0 * * * * *", now)
	editSpec(t, env, func(s *jobspec.Spec) {
		s.OverlapPolicy, s.TimeoutSec = policy, 300
		s.WaitSec = jobspec.StartWaitSec(policy, 0, s.TimeoutSec)
	})
	env.OverlapPoll, env.Heartbeat, env.KillGrace = 20*time.Millisecond, 50*time.Millisecond, time.Second
	env.Start = Start{ByTimer: true}
	return env, locks
}

func web(locks string) string { return filepath.Join(filepath.Dir(locks), "www") }

func hold(t *testing.T, locks, slot string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(web(locks), "hold-"+slot), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

func unhold(t *testing.T, locks, slot string) {
	t.Helper()
	if err := os.Remove(filepath.Join(web(locks), "hold-"+slot)); err != nil {
		t.Fatal(err)
	}
}

// runs is every slot that ran, in order.
func runs(t *testing.T, locks string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(web(locks), "runs"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// node is another node of the shard on its own settable clock.
func node(t *testing.T, env Env, name string, c *clock) Env {
	env = otherNode(t, env, name, time.Time{})
	env.Now = c.now
	return env
}

// async runs env in the background; the returned func waits for its exit.
func async(env Env) func() int {
	var wg sync.WaitGroup
	var code int
	wg.Add(1)
	go func() { defer wg.Done(); code = Run(env) }()
	return func() int { wg.Wait(); return code }
}

// eventually polls cond (the processes run on real time).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

// beatsAt waits until the holder's lease in the slot stamp has beaten at
// or after at (its clock was just moved there): sleeping a few heartbeats
// instead flaked on a loaded machine, where the holder's beat came later
// and a waiter then judged its lease stale.
func beatsAt(t *testing.T, locks string, at time.Time) {
	t.Helper()
	eventually(t, "the holder's lease beats at "+at.Format(time.RFC3339), func() bool {
		st, ok, _, err := readStamp(filepath.Join(locks, "cron-"+id+".slot"), at)
		return err == nil && ok && !st.Heartbeat.Before(at)
	})
}

func waiting(t *testing.T, env Env) func() bool {
	return func() bool {
		r, err := ReadRecord(env.RuntimeDir)
		return err == nil && r.Waiting
	}
}

const (
	slot0 = "2026-11-21T12:00:00Z"
	slot1 = "2026-11-21T12:01:00Z"
	slot2 = "2026-11-21T12:02:00Z"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 2, 0, time.UTC)

// startHolder runs slot 12:00 on node1 (on clock c, which then moves to
// 12:01:03 for every node) and holds it until unhold.
func startHolder(t *testing.T, env Env, locks string, c *clock) func() int {
	hold(t, locks, slot0)
	env.Now = c.now
	done := async(env)
	eventually(t, "node1 runs 12:00", func() bool { return len(runs(t, locks)) == 1 })
	c.set(time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC))
	beatsAt(t, locks, c.now()) // its lease beats at the new time
	return done
}

// TestBufferOneWaitsThenRunsOnce: node1 overruns 12:00; 12:01 fires on
// node2 and node3, both wait; when the run ends exactly one of them runs
// 12:01, the other is silent, and node1's start queued behind its own
// run finds the slot taken.
func TestBufferOneWaitsThenRunsOnce(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, t0)
	c := newClock(t0)
	done1 := startHolder(t, env, locks, c)
	node2, node3 := node(t, env, "node2", c), node(t, env, "node3", c)
	done2, done3 := async(node2), async(node3)
	eventually(t, "node2 and node3 wait", func() bool { return waiting(t, node2)() && waiting(t, node3)() })
	if got := runs(t, locks); len(got) != 1 {
		t.Fatalf("runs while the previous run holds: %v", got)
	}
	c.set(time.Date(2026, 11, 21, 12, 1, 30, 0, time.UTC))
	unhold(t, locks, slot0)
	if code := done1(); code != 0 {
		t.Fatalf("node1 exit %d", code)
	}
	code2, code3 := done2(), done3()
	if got := runs(t, locks); len(got) != 2 || got[1] != slot1 {
		t.Fatalf("runs %v, want 12:00 and 12:01 once", got)
	}
	r2, r3 := record(t, node2), record(t, node3)
	if (r2.Kind == KindRan) == (r3.Kind == KindRan) {
		t.Fatalf("node2 %+v (exit %d), node3 %+v (exit %d): want exactly one ran", r2, code2, r3, code3)
	}
	loser := r2
	if r2.Kind == KindRan {
		loser = r3
	}
	if loser.Kind != KindContention || loser.Waiting {
		t.Errorf("the other waiter: %+v, want contention (silent)", loser)
	}
	// node1's start that systemd queued behind its run: the slot is taken.
	late := node(t, env, "node1", newClock(time.Date(2026, 11, 21, 12, 1, 31, 0, time.UTC)))
	if code := Run(late); code != ExitSkip || len(runs(t, locks)) != 2 {
		t.Errorf("late start after the overrun: exit %d, runs %v", code, runs(t, locks))
	}
	if !Silent(record(t, late).Kind) {
		t.Errorf("late start record %+v, want silent", record(t, late))
	}
}

// TestBufferOneThirdSlotWhileOneWaits: 12:01 waits on node2; before 12:02
// fires it gives up (reported overlap_skipped once); 12:02 waits on node3
// and runs once when the run ends: at most one slot is buffered, the
// newest, and 12:01 never runs.
func TestBufferOneThirdSlotWhileOneWaits(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, t0)
	c := newClock(t0)
	done1 := startHolder(t, env, locks, c)
	node2 := node(t, env, "node2", c)
	done2 := async(node2)
	eventually(t, "node2 waits", waiting(t, node2))
	// Time passes (in steps under LeaseTTL, as the holder's lease beats).
	c.set(time.Date(2026, 11, 21, 12, 1, 30, 0, time.UTC))
	beatsAt(t, locks, c.now())
	c.set(time.Date(2026, 11, 21, 12, 2, 0, 0, time.UTC).Add(-GiveUpBeforeNext))
	if code := done2(); code != ExitSkip {
		t.Fatalf("node2 exit %d, record %+v", code, record(t, node2))
	}
	r := record(t, node2)
	if r.Kind != KindOverlap || r.Waiting || !strings.Contains(r.Reason, "gave up waiting") || r.RunKey != id+"#scheduled#"+slot1 {
		t.Fatalf("node2 gave up with %+v, want overlap (reported)", r)
	}
	c.set(time.Date(2026, 11, 21, 12, 2, 4, 0, time.UTC))
	beatsAt(t, locks, c.now())
	node3 := node(t, env, "node3", c)
	done3 := async(node3)
	eventually(t, "node3 waits", waiting(t, node3))
	unhold(t, locks, slot0)
	done1()
	if code := done3(); code != 0 {
		t.Fatalf("node3 exit %d, record %+v", code, record(t, node3))
	}
	if got := runs(t, locks); len(got) != 2 || got[1] != slot2 {
		t.Errorf("runs %v, want 12:00 and 12:02 (12:01 skipped)", got)
	}
	// A waiter of 12:01 that got the lock only now still runs nothing:
	// the slot was decided a skip.
	late := node(t, env, "node4", newClock(time.Date(2026, 11, 21, 12, 1, 20, 0, time.UTC)))
	if code := Run(late); code != ExitSkip || len(runs(t, locks)) != 2 {
		t.Errorf("12:01 after its skip: exit %d, runs %v", code, runs(t, locks))
	}
}

// TestBufferOneWaiterStopped: a waiter told to stop (a disable, a node
// shutdown) runs nothing and says nothing; another node's waiter still
// runs the slot once.
func TestBufferOneWaiterStopped(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, t0)
	c := newClock(t0)
	done1 := startHolder(t, env, locks, c)
	var stop atomic.Bool
	node2 := node(t, env, "node2", c)
	node2.Sleep = func(d time.Duration) bool { time.Sleep(d); return !stop.Load() }
	node3 := node(t, env, "node3", c)
	done2, done3 := async(node2), async(node3)
	eventually(t, "both wait", func() bool { return waiting(t, node2)() && waiting(t, node3)() })
	stop.Store(true)
	if code := done2(); code != ExitSkip {
		t.Fatalf("stopped waiter exit %d", code)
	}
	if r := record(t, node2); !Silent(r.Kind) || r.Waiting {
		t.Errorf("stopped waiter %+v, want silent", r)
	}
	unhold(t, locks, slot0)
	done1()
	if code := done3(); code != 0 {
		t.Fatalf("node3 exit %d", code)
	}
	if got := runs(t, locks); len(got) != 2 || got[1] != slot1 {
		t.Errorf("runs %v", got)
	}
}

// TestBufferOneHolderDies: the holder stops heart-beating while a slot
// waits (a crashed node whose flock CephFS keeps): the waiter reports the
// platform error once, naming the holder, and runs nothing.
func TestBufferOneHolderDies(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, t0)
	now := time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC)
	holdLock(t, locks, `{"slot":"`+slot0+`","holder":"node9","run_key":"k","heartbeat":"2026-11-21T12:01:00Z"}`)
	c := newClock(now)
	node2 := node(t, env, "node2", c)
	done2 := async(node2)
	eventually(t, "node2 waits", waiting(t, node2))
	c.set(now.Add(LeaseTTL + time.Second))
	if code := done2(); code != ExitPlatformError {
		t.Fatalf("exit %d, want %d", code, ExitPlatformError)
	}
	if r := record(t, node2); r.Kind != KindPlatformError || !strings.Contains(r.Reason, "node9 stopped heart-beating") {
		t.Errorf("record %+v", r)
	}
	if len(runs(t, locks)) != 0 {
		t.Errorf("ran: %v", runs(t, locks))
	}
}

// TestCancelPreviousStopsHolderAndRunsNewSlot: node1's run of 12:00 is
// still going when 12:01 comes; it stops its command itself (recorded as
// superseded, reported cancelled), node2 and node3 wait for the lock, and
// exactly one runs 12:01.
func TestCancelPreviousStopsHolderAndRunsNewSlot(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapCancelPrevious, time.Date(2026, 11, 21, 12, 0, 59, 500e6, time.UTC))
	hold(t, locks, slot0)
	c1 := newClock(t0) // node1 fires 12:00 and stops its run when 12:01 comes by its clock
	env.Now = c1.now
	done1 := async(env)
	eventually(t, "node1 runs 12:00", func() bool { return len(runs(t, locks)) == 1 })
	c1.set(time.Date(2026, 11, 21, 12, 0, 59, 0, time.UTC))
	beatsAt(t, locks, c1.now())
	// node2 and node3 fire 12:01 a little ahead of node1's clock (their
	// timer delays, or node1 a second slow): the run still holds the lock.
	c := newClock(time.Date(2026, 11, 21, 12, 1, 2, 0, time.UTC))
	node2, node3 := node(t, env, "node2", c), node(t, env, "node3", c)
	done2, done3 := async(node2), async(node3)
	eventually(t, "node2 and node3 wait", func() bool { return waiting(t, node2)() && waiting(t, node3)() })
	if got := runs(t, locks); len(got) != 1 {
		t.Fatalf("runs before the stop: %v", got)
	}
	c1.set(time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC)) // the new slot comes for node1
	code1 := done1()
	r1 := record(t, env)
	if r1.Kind != KindRan || r1.SupersededBy == nil || !r1.SupersededBy.Equal(time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC)) || r1.Signal != "SIGTERM" {
		t.Fatalf("node1 (exit %d) %+v, want ran, superseded by 12:01, SIGTERM", code1, r1)
	}
	done2()
	done3()
	if got := runs(t, locks); len(got) != 2 || got[1] != slot1 {
		t.Fatalf("runs %v, want 12:00 then 12:01 once", got)
	}
	if k2, k3 := record(t, node2).Kind, record(t, node3).Kind; (k2 == KindRan) == (k3 == KindRan) || !Silent(k2) && !Silent(k3) && k2 != KindRan && k3 != KindRan {
		t.Errorf("node2 %s, node3 %s: want one ran, one silent", k2, k3)
	}
}

// TestCancelPreviousOnOneNode: on the node that ran 12:00 (a one-node
// shard) the only start of 12:01 is the one systemd queues behind the
// stopped run; it runs the slot once, because the stamp shows the run
// that overlapped it. A late start with no such run (a restarted timer)
// stays a late fire.
func TestCancelPreviousOnOneNode(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapCancelPrevious, t0)
	stamp := `{"slot":"` + slot0 + `","holder":"node1","run_key":"k","heartbeat":"2026-11-21T12:01:05Z","released":true}`
	if err := os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(stamp), 0o600); err != nil {
		t.Fatal(err)
	}
	restarted := node(t, env, "node1", newClock(time.Date(2026, 11, 21, 12, 1, 51, 0, time.UTC)))
	if code := Run(restarted); code != ExitSkip || len(runs(t, locks)) != 0 {
		t.Fatalf("late start 46 s after the release: exit %d, runs %v", code, runs(t, locks))
	}
	// 21 s after the release (the drain, systemd's stop of leftovers and
	// the outcome hook came between): past FireMargin, within
	// AfterOverrunMargin.
	queued := node(t, env, "node1", newClock(time.Date(2026, 11, 21, 12, 1, 26, 0, time.UTC)))
	if code := Run(queued); code != 0 {
		t.Fatalf("queued start: exit %d, record %+v", code, record(t, queued))
	}
	if got := runs(t, locks); len(got) != 1 || got[0] != slot1 {
		t.Errorf("runs %v, want 12:01", got)
	}
	again := node(t, env, "node1", newClock(time.Date(2026, 11, 21, 12, 1, 27, 0, time.UTC)))
	if code := Run(again); code != ExitSkip || len(runs(t, locks)) != 1 {
		t.Errorf("a second queued start ran the slot again: exit %d, runs %v", code, runs(t, locks))
	}
}

// TestRunnerEnforcesTheTimeoutAfterAWait: with a wait in the unit's start
// timeout (WaitSec), the runner stops the command at the job's timeout
// from the command's start and records it timed out.
func TestRunnerEnforcesTheTimeoutAfterAWait(t *testing.T) {
	env, _ := setupPolicy(t, wire.OverlapBufferOne, t0)
	setCommand(t, env, "sleep 30")
	editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = 1 })
	started := time.Now()
	Run(env)
	r := record(t, env)
	if r.Kind != KindRan || !r.TimedOut || r.Signal != "SIGTERM" || r.SupersededBy != nil {
		t.Errorf("record %+v, want ran, timed out by SIGTERM", r)
	}
	if el := time.Since(started); el > 10*time.Second {
		t.Errorf("took %s", el)
	}
}

// TestLateStartRunsAPendingRequest: a late start of a buffer_one job that
// is not the one queued behind an overlapping run still runs a pending
// run-now request (as a late fire does), and does not mark the slot as
// run.
func TestLateStartRunsAPendingRequest(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, time.Date(2026, 11, 21, 12, 1, 50, 0, time.UTC))
	env.ManualDir = t.TempDir()
	writeRequest(t, env.ManualDir, "42", env.Now().Add(-time.Second))
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d, record %+v", code, record(t, env))
	}
	if r := record(t, env); r.Kind != KindRan || r.RunKey != id+"#manual#42" {
		t.Errorf("record %+v, want the request ran", r)
	}
	b, _ := os.ReadFile(filepath.Join(locks, "cron-"+id+".slot"))
	if strings.Contains(string(b), slot1) {
		t.Errorf("stamp %s names the slot that did not run", b)
	}
	if got := runs(t, locks); len(got) != 1 {
		t.Errorf("runs %v, want the request's only", got)
	}
}

// TestWaiterStoppableBeforeItWaits: a buffer_one slot that finds the lock
// busy says Waiting from its first record, through the stamp wait
// (StampWait, while the previous run still goes), so the node agent's
// one stop for a disable, delete or change is not refused there; the
// SIGTERM it sends in that window runs nothing, even when the lock comes
// free right after, and the runner exits silently.
func TestWaiterStoppableBeforeItWaits(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC))
	holder := holdLock(t, locks, `{"slot":"`+slot0+`","holder":"node9","run_key":"k","heartbeat":"2026-11-21T12:01:02Z"}`)
	env.StampWait = 3 * time.Second // the window of the finding: seconds
	done := async(env)
	eventually(t, "a record", func() bool { _, err := ReadRecord(env.RuntimeDir); return err == nil })
	if r := record(t, env); r.Kind != KindStarted || !r.Waiting {
		t.Fatalf("record in the stamp wait %+v: the node agent would refuse to stop it", r)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // the runtime hands it on
	holder.Close()                     // the previous run ends: the lock is free
	if code := done(); code != ExitSkip {
		t.Fatalf("exit %d, record %+v", code, record(t, env))
	}
	if r := record(t, env); !Silent(r.Kind) || r.Waiting {
		t.Errorf("record %+v, want silent", r)
	}
	if got := runs(t, locks); len(got) != 0 {
		t.Errorf("ran %v after the stop", got)
	}
	if b, _ := os.ReadFile(filepath.Join(locks, "cron-"+id+".slot")); strings.Contains(string(b), slot1) {
		t.Errorf("stamp %s: a stopped waiter took the slot from the others", b)
	}
}

// TestWaiterStaysStoppableWhileItElects: the waiter that gets the lock
// keeps its record Waiting through the election (stamp and marker I/O),
// and a SIGTERM that comes then runs nothing.
func TestWaiterStaysStoppableWhileItElects(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC))
	holder := holdLock(t, locks, `{"slot":"`+slot0+`","holder":"node9","run_key":"k","heartbeat":"2026-11-21T12:01:02Z"}`)
	var seen Record
	env.electing = func() {
		seen = record(t, env)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond)
	}
	done := async(env)
	eventually(t, "node1 waits", waiting(t, env))
	time.Sleep(env.StampWait + 100*time.Millisecond) // into the wait's polls
	holder.Close()
	if code := done(); code != ExitSkip {
		t.Fatalf("exit %d, record %+v", code, record(t, env))
	}
	if seen.Kind != KindStarted || !seen.Waiting {
		t.Errorf("record while electing %+v: the node agent would refuse to stop it", seen)
	}
	if r := record(t, env); !Silent(r.Kind) {
		t.Errorf("record %+v, want silent", r)
	}
	if got := runs(t, locks); len(got) != 0 {
		t.Errorf("ran %v after the stop", got)
	}
}

// escapeGroup is a command that moves itself into the runner's own
// process group (same session, so setpgid allows it), out of the group
// the runner signals, and then runs long.
const escapeGroup = `exec perl -e '$| = 1; setpgrp(0, getpgrp(getppid())) or die "setpgrp: $!"; print "escaped\n"; sleep 100'`

func needPerl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl for the process group escape")
	}
}

// TestTimeoutReachesACommandThatLeftItsGroup: the runner's timeout stops
// a command that moved itself out of its process group: the runner
// signals the command by its pid too, so it ends at its timeout, not at
// the unit's start timeout (timeout + wait).
func TestTimeoutReachesACommandThatLeftItsGroup(t *testing.T) {
	needPerl(t)
	env, _ := setupPolicy(t, wire.OverlapBufferOne, t0)
	setCommand(t, env, escapeGroup)
	editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = 1 })
	started := time.Now()
	Run(env)
	if el := time.Since(started); el > 15*time.Second {
		t.Errorf("took %s: the stop did not reach the command", el)
	}
	r := record(t, env)
	if r.Kind != KindRan || !r.TimedOut || r.Signal == "" {
		t.Errorf("record %+v, want ran, timed out by a signal", r)
	}
	if r.OutputTail == nil || !strings.Contains(*r.OutputTail, "escaped") {
		t.Errorf("output %v: the command did not escape its group, the test tests nothing", r.OutputTail)
	}
}

// TestCancelPreviousStopReachesACommandThatLeftItsGroup: the same for the
// stop when the next slot comes (cancel_previous).
func TestCancelPreviousStopReachesACommandThatLeftItsGroup(t *testing.T) {
	needPerl(t)
	env, _ := setupPolicy(t, wire.OverlapCancelPrevious, t0)
	setCommand(t, env, escapeGroup)
	c := newClock(t0)
	env.Now = c.now
	started := time.Now()
	done := async(env)
	eventually(t, "the command runs", func() bool { r, err := ReadRecord(env.RuntimeDir); return err == nil && r.Kind == KindRan })
	time.Sleep(300 * time.Millisecond) // it escapes
	c.set(time.Date(2026, 11, 21, 12, 1, 0, 0, time.UTC))
	done()
	if el := time.Since(started); el > 15*time.Second {
		t.Errorf("took %s: the stop did not reach the command", el)
	}
	if r := record(t, env); r.Kind != KindRan || r.SupersededBy == nil || r.Signal == "" {
		t.Errorf("record %+v, want ran, superseded, ended by a signal", r)
	}
}
