package runner

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Skip policy, a previous run that ends as a real one does: it writes
// released (release()) before it lets go of the flock, after the slot
// fired. The loser's stamp wait sees that release; the run overlapped the
// slot, so the slot stays overlap_skipped (it is not run late).
func TestLoserSkipsWhenThePreviousRunReleasesDuringTheStampWait(t *testing.T) {
	env, locks := setup(t, "echo run >> ran") // slot 12:00:10, now 12:00:13, policy skip
	holder := holdLock(t, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"`+id+`#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:12Z"}`)
	go func() {
		time.Sleep(50 * time.Millisecond)
		// what release() does, then the runner exits
		_ = os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(`{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"`+id+`#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:13Z","released":true}`+"\n"), 0o600)
		holder.Close()
	}()
	node2 := otherNode(t, env, "node2", env.Now())
	node2.StampWait = time.Second
	code := Run(node2)
	r := record(t, node2)
	t.Logf("node2 exit %d kind %s, runs %d", code, r.Kind, slotRuns(t, locks))
	if r.Kind != KindOverlap {
		t.Errorf("node2 record %+v, want overlap_skipped (the previous run held the lock when the slot fired)", r)
	}
}

// The same with real runners on both sides (skip policy).
func TestLoserSkipsBehindARealPreviousRun(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapSkip, t0)
	c := newClock(t0)
	done1 := startHolder(t, env, locks, c) // node1 runs 12:00, clock now 12:01:03
	node2 := node(t, env, "node2", c)
	node2.StampWait = 2 * time.Second
	done2 := async(node2)
	time.Sleep(300 * time.Millisecond)
	unhold(t, locks, slot0)
	done1()
	code := done2()
	r := record(t, node2)
	t.Logf("node2 exit %d kind %s runs %v", code, r.Kind, runs(t, locks))
	if r.Kind != KindOverlap {
		t.Errorf("node2 %+v, want overlap_skipped under skip", r)
	}
}

// A buffer_one waiter stopped during its stamp wait, while the previous
// run ends as a real one does (released, then the flock let go): it takes
// no lock and writes no stamp ("a waiter looks before each try of the
// lock"), so another node's waiter still runs the slot, once.
func TestStoppedWaiterTakesNoLockInTheStampWait(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC))
	holder := holdLock(t, locks, `{"slot":"`+slot0+`","holder":"node9","run_key":"k","heartbeat":"2026-11-21T12:01:02Z"}`)
	env.StampWait = 3 * time.Second
	done := async(env)
	eventually(t, "a record", func() bool { _, err := ReadRecord(env.RuntimeDir); return err == nil })
	_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	_ = os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(`{"slot":"`+slot0+`","holder":"node9","run_key":"k","heartbeat":"2026-11-21T12:01:03Z","released":true}`+"\n"), 0o600)
	holder.Close()
	code := done()
	r := record(t, env)
	b, _ := os.ReadFile(filepath.Join(locks, "cron-"+id+".slot"))
	t.Logf("exit %d record %s/%s stamp %s runs %v", code, r.Kind, r.Reason, b, runs(t, locks))
	if strings.Contains(string(b), slot1) {
		t.Errorf("stamp %s: a stopped waiter took the slot from the others", b)
	}
	// another node's waiter would now find the slot covered and run nothing
	other := node(t, env, "node3", newClock(time.Date(2026, 11, 21, 12, 1, 5, 0, time.UTC)))
	oc := Run(other)
	t.Logf("node3 exit %d kind %s runs %v", oc, record(t, other).Kind, runs(t, locks))
	if got := runs(t, locks); oc != 0 || len(got) != 1 || got[0] != slot1 {
		t.Errorf("node3 exit %d, runs %v: want the slot %s run once, by node3", oc, got, slot1)
	}
}

// Skip policy, two losers. node2's stamp wait ends on an unreleased
// stamp; between that read and its skip marker (a slow O_EXCL create on
// CephFS, a preempted process) the previous run releases (after the slot)
// and lets go. node3, still in its stamp wait, must not take the lock and
// run the slot that node2 then reports overlap_skipped under the same key.
func TestLateReleaseDoesNotRunASlotAnotherNodeSkips(t *testing.T) {
	env, locks := setup(t, "echo run >> ran")
	holder := holdLock(t, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"`+id+`#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:12Z"}`)
	now := env.Now()
	node2 := otherNode(t, env, "node2", now)
	node3 := otherNode(t, env, "node3", now)
	node2.StampWait, node3.StampWait = 500*time.Millisecond, 3*time.Second
	var fired atomic.Bool
	node2.Now = func() time.Time {
		pc, _, _, _ := runtime.Caller(1)
		if strings.HasSuffix(runtime.FuncForPC(pc).Name(), "runner.lost") && fired.CompareAndSwap(false, true) {
			// node2 is between its last stamp read and its marker.
			_ = os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(`{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"`+id+`#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:13Z","released":true}`+"\n"), 0o600)
			holder.Close()
			for i := 0; i < 100 && slotRuns(t, locks) == 0; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		}
		return now
	}
	done3 := async(node3)
	time.Sleep(20 * time.Millisecond)
	code2 := Run(node2)
	code3 := done3()
	if !fired.Load() {
		t.Fatal("the release between node2's last stamp read and its marker never happened (the hook on lost's clock reading missed)")
	}
	r2, r3 := record(t, node2), record(t, node3)
	t.Logf("node2 exit %d %s; node3 exit %d %s; runs %d", code2, r2.Kind, code3, r3.Kind, slotRuns(t, locks))
	if r2.Kind == KindOverlap && r3.Kind == KindRan {
		t.Errorf("slot %s ran on node3 and was reported overlap_skipped by node2", r2.RunKey)
	}
}

// buffer_one: the previous run released before the slot; an election
// holds the flock past the stamp wait without ever stamping (its node
// died between flock and stamp; CephFS keeps the flock until it evicts
// the node), then lets go well before the next slot. The waiter waits for
// the lock as behind a run, and runs the slot once it is free.
func TestWaiterWaitsOutAnElectionThatNeverStamps(t *testing.T) {
	env, locks := setupPolicy(t, wire.OverlapBufferOne, time.Date(2026, 11, 21, 12, 1, 3, 0, time.UTC))
	holder := holdLock(t, locks, `{"slot":"`+slot0+`","holder":"node9","run_key":"`+id+`#scheduled#`+slot0+`","heartbeat":"2026-11-21T12:00:30Z","released":true}`)
	go func() { time.Sleep(800 * time.Millisecond); holder.Close() }()
	env.StampWait = 300 * time.Millisecond
	code := Run(env)
	r := record(t, env)
	if got := runs(t, locks); len(got) != 1 || got[0] != slot1 {
		t.Errorf("slot %s not run (runs %v, exit %d, kind %s): buffer_one gave up after the stamp wait", slot1, got, code, r.Kind)
	}
}
