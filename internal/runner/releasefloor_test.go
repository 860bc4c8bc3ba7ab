package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestReleaseChildRun is the helper process of the test below: one start of
// the service, as cron-run runs it (os.Exit(runner.Main()): the process
// ends as soon as Run returns, and any goroutine with it).
func TestReleaseChildRun(t *testing.T) {
	spec := os.Getenv("RELEASE_CHILD_SPEC")
	if spec == "" {
		t.Skip("helper process of TestShortTimeoutStillReleasesTheLease")
	}
	now, err := time.Parse(time.RFC3339, os.Getenv("RELEASE_CHILD_NOW"))
	if err != nil {
		t.Fatal(err)
	}
	env := Env{SpecPath: spec, RuntimeDir: os.Getenv("RELEASE_CHILD_RT"), Node: "node1", Now: func() time.Time { return now },
		StampWait: 200 * time.Millisecond, Heartbeat: HeartbeatEvery, Started: time.Now()}
	os.Exit(Run(env))
}

// A run whose command ends within timeoutMargin of its unit's timeout
// (timeout_seconds 1 or 2, which the API accepts, or a command ending in
// its last 2 s) finds releaseWithin's bound passed; it still waits for
// the release on healthy storage (releaseFloor), so its lease is released
// and the next slot runs. Without the floor the runner wrote its record
// and exited at once, the process's exit cut the release, and the lease
// read as a run under way: node2, behind another node's start that let go
// without a stamp, decided an overlap with nothing running and the slot
// never ran (review s20e, 48 of 50 trials). node1 runs in a process of its
// own, as cron-run does (os.Exit(runner.Main())), with its runtime dir on
// a tmpfs. Timeout 0 (an older spec, no bound) is the control.
func TestShortTimeoutStillReleasesTheLease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout int
		command string
	}{
		{"timeout 0 (control: waits for the release)", 0, "echo run >> ran"},
		{"timeout_seconds 2", 2, "echo run >> ran"},
		{"timeout_seconds 3, command ends after 1.2 s", 3, "sleep 1.2; echo run >> ran"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for trial := 0; trial < 5; trial++ {
				env, locks := setup(t, tc.command) // node2's clock: 12:00:13, slot 12:00:10
				editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = tc.timeout })
				// The unit's RuntimeDirectory is a tmpfs (/run).
				rt, err := os.MkdirTemp("/dev/shm", "hostcron-rt-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(rt) })
				// node1 runs the 12:00:00 slot in its own process.
				child := exec.Command(os.Args[0], "-test.run=^TestReleaseChildRun$", "-test.count=1")
				child.Env = append(os.Environ(), "RELEASE_CHILD_SPEC="+env.SpecPath, "RELEASE_CHILD_RT="+rt, "RELEASE_CHILD_NOW=2026-11-21T12:00:03Z")
				if out, err := child.CombinedOutput(); err != nil {
					t.Fatalf("node1's run of 12:00:00: %v\n%s", err, out)
				}
				stamp, _ := os.ReadFile(filepath.Join(locks, wire.SlotStampName(id)))
				// 12:00:10: a start on another node holds the lock 50 ms and
				// lets go without a stamp; node2's timer fires meanwhile.
				node2 := behindAHolderLettingGo(t, env, locks, "", 2*time.Second)
				code := Run(node2)
				if r := record(t, node2); code != 0 || r.Kind != KindRan {
					t.Fatalf("trial %d: node2 exit %d, record kind %s (%s): slot 12:00:10 never runs, though node1's run of 12:00:00 ended on healthy storage 10 s before; stamp node1 left: %s",
						trial, code, r.Kind, r.Reason, stamp)
				}
				if n := slotRuns(t, locks); n != 2 {
					t.Fatalf("trial %d: %d runs, want 2 (12:00:00 and 12:00:10)", trial, n)
				}
			}
		})
	}
}

// A command that ends with the drain's bound already passed (timeout 2:
// the bound is 2 s before the unit's timeout) still has its last bytes,
// already in the pipe, in the record's tail: stop gives the reader
// drainFloor once it no longer waits (review s20e: 7-17 of 100 runs lost
// "hello" when the runner went straight to the drain; 1 in 3 test runs
// lost one before, when the release's I/O came first).
func TestShortTimeoutKeepsTheOutputTail(t *testing.T) {
	for i := 0; i < 100; i++ {
		env, _ := setup(t, "echo hello")
		editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = 2 })
		rt, err := os.MkdirTemp("/dev/shm", "hostcron-rt-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(rt) })
		env.RuntimeDir, env.Started, env.Output = rt, time.Now(), &lockedBuffer{}
		if code := Run(env); code != 0 {
			t.Fatalf("run %d: exit %d", i, code)
		}
		// The tail only: past the bound the runner does not wait for the
		// journal's copy (TestStalledJournalPastTheBoundIsNotWaitedFor),
		// so it may mark the run's journal output as possibly cut.
		if r := record(t, env); r.OutputTail == nil || *r.OutputTail != "hello\n" {
			t.Fatalf("run %d: the record's tail %q for a command that wrote \"hello\" and exited at once", i, derefTail(r.OutputTail))
		}
	}
}
