package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// slotRuns counts the command's runs: each appends a line to "ran" in the
// shared webroot.
func slotRuns(t *testing.T, locks string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "ran"))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// behindAHolderLettingGo is node2, whose timer fires for the 12:00:10
// slot while another node holds the job's lock with stamp; the holder
// lets go 50 ms later. node2 waits up to stampWait for a stamp.
func behindAHolderLettingGo(t *testing.T, env Env, locks, stamp string, stampWait time.Duration) Env {
	t.Helper()
	holder := holdLock(t, locks, stamp)
	go func() { time.Sleep(50 * time.Millisecond); holder.Close() }()
	node2 := otherNode(t, env, "node2", env.Now())
	node2.StampWait = stampWait
	return node2
}

// releasedStamp is the stamp of the 12:00:00 slot's run, ended and let go.
const releasedStamp = `{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"` + id + `#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:05Z","released":true}`

// A node that took the lock for the 12:00:10 slot let go without a stamp
// (killed between the flock and the stamp, or it decided something else
// under the lock). The node that lost the lock to it must not decide an
// overlap (nothing was running): it takes the lock when it is let go and
// runs the slot, once; a later node stays silent.
func TestLoserRunsTheSlotWhenTheHolderLetsGoWithoutAStamp(t *testing.T) {
	env, locks := setup(t, "echo run >> ran") // slot 12:00:10, now 12:00:13
	node2 := behindAHolderLettingGo(t, env, locks, releasedStamp, 2*time.Second)
	if code := Run(node2); code != 0 {
		t.Fatalf("node2 exit %d, want 0 (it ran the slot); record %+v", code, record(t, node2))
	}
	if r := record(t, node2); r.Kind != KindRan || r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" {
		t.Errorf("node2 record %+v, want the slot's run", r)
	}
	node3 := otherNode(t, env, "node3", env.Now().Add(4*time.Second))
	if code := Run(node3); code != ExitSkip || record(t, node3).Kind != KindContention {
		t.Errorf("node3 exit %d record %+v, want a silent contention", code, record(t, node3))
	}
	if n := slotRuns(t, locks); n != 1 {
		t.Errorf("the slot ran %d times, want once", n)
	}
}

// No fault at all: the agent starts the service again for a run-now
// request it already served (an activity retry), and that start holds
// the lock for its claim check just as another node's timer fires for
// the 12:00:10 slot. The slot still runs exactly once.
func TestServedRunNowStartDoesNotCostTheSlot(t *testing.T) {
	env, locks := setup(t, "echo run >> ran")
	if err := os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(releasedStamp+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeDone(filepath.Join(locks, wire.ManualStampName(id)), nil, "42"); err != nil {
		t.Fatal(err)
	}
	a := otherNode(t, env, "nodeA", env.Now())
	a.ManualDir = t.TempDir()
	writeRequest(t, a.ManualDir, "42", env.Now().Add(-20*time.Second))
	b := otherNode(t, env, "nodeB", env.Now())
	b.StampWait = 2 * time.Second
	bDone := make(chan int)
	a.electing = func() { // nodeA holds the lock: nodeB's timer fires now
		go func() { bDone <- Run(b) }()
		time.Sleep(50 * time.Millisecond)
	}
	if code := Run(a); code != ExitSkip {
		t.Fatalf("nodeA (the served request's second start) exit %d, want a silent skip; record %+v", code, record(t, a))
	}
	if code := <-bDone; code != 0 || record(t, b).Kind != KindRan {
		t.Errorf("nodeB exit %d record %+v, want the slot's run", code, record(t, b))
	}
	c := otherNode(t, env, "nodeC", env.Now().Add(5*time.Second))
	if code := Run(c); code != ExitSkip || record(t, c).Kind != KindContention {
		t.Errorf("nodeC exit %d record %+v, want a silent contention", code, record(t, c))
	}
	if n := slotRuns(t, locks); n != 1 {
		t.Errorf("the slot ran %d times, want once", n)
	}
}

// The lock's holder is the previous slot's run (its lease not released):
// a loser decides the overlap at once as before, even when that run ends
// during the stamp wait; the loser does not take the lock and run late.
func TestLoserStillSkipsWhenThePreviousRunHoldsTheLock(t *testing.T) {
	env, locks := setup(t, "echo run >> ran")
	node2 := behindAHolderLettingGo(t, env, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"`+id+`#scheduled#2026-11-21T12:00:00Z","heartbeat":"2026-11-21T12:00:12Z"}`, time.Second)
	if code := Run(node2); code != ExitSkip {
		t.Fatalf("node2 exit %d, want the overlap's skip", code)
	}
	if r := record(t, node2); r.Kind != KindOverlap {
		t.Errorf("node2 record %+v, want overlap_skipped", r)
	}
	if n := slotRuns(t, locks); n != 0 {
		t.Errorf("the slot ran %d times despite the overlap", n)
	}
}

// An election that holds the lock past the whole stamp wait (a winner slow
// to write its stamp on slow storage) with the last run released before
// the slot: the loser leaves the slot to it, silently, and creates no
// skip marker, which would make that winner skip the slot.
func TestLoserLeavesTheSlotToAnElectionPastTheStampWait(t *testing.T) {
	env, locks := setup(t, "echo run >> ran")
	holder := holdLock(t, locks, releasedStamp)
	node2 := otherNode(t, env, "node2", env.Now())
	node2.StampWait = 300 * time.Millisecond
	if code := Run(node2); code != ExitSkip || record(t, node2).Kind != KindContention {
		t.Fatalf("node2 exit %d record %+v, want a silent contention", code, record(t, node2))
	}
	if m, _ := filepath.Glob(filepath.Join(locks, "*.skip.*")); len(m) != 0 {
		t.Fatalf("skip markers %v: the slot was decided an overlap with no run under way", m)
	}
	holder.Close() // the slow election ends without a stamp (it failed)
	node3 := otherNode(t, env, "node3", env.Now().Add(2*time.Second))
	if code := Run(node3); code != 0 || record(t, node3).Kind != KindRan {
		t.Errorf("node3 exit %d record %+v, want the slot's run", code, record(t, node3))
	}
	if n := slotRuns(t, locks); n != 1 {
		t.Errorf("the slot ran %d times, want once", n)
	}
}
