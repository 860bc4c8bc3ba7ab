package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
)

// A node whose runtime dir cannot take the record (/run full or read-only)
// must not run the slot: its outcome hook would find no record and report
// nothing, so a real run would be hidden (the core records it lost). It
// must not touch shared storage either, so another node runs the slot.
func TestNoRecordNoRun(t *testing.T) {
	env, locks := setup(t, "touch ran")
	bad := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := env
	broken.RuntimeDir = filepath.Join(bad, "run") // ENOTDIR: no record can be written
	if code := Run(broken); code == 0 || code == ExitSkip || ran(t, broken) {
		t.Fatalf("exit %d, ran=%v: a node that cannot record its run ran it", code, ran(t, broken))
	}
	if _, err := os.Stat(filepath.Join(locks, "cron-"+id+".slot")); err == nil {
		t.Fatal("the node that cannot record stamped the slot: no other node will run it")
	}
	other := otherNode(t, env, "node2", env.Now().Add(2*time.Second))
	if code := Run(other); code != 0 || !ran(t, other) || record(t, other).Kind != KindRan {
		t.Fatalf("node2 exit %d: the slot did not run on a healthy node", code)
	}
}

// A node whose clock is more than MaxSkew behind reads a correct stamp as
// "corrupt, in the future". Overwriting it with its own (older) slot would
// rewind the stamp, and a correct node that fires the same slot a few
// seconds later (RandomizedDelaySec) would run it a second time. Its clock
// is not verified (no measurement) or measured off: it overwrites nothing,
// runs nothing, and reports a platform error naming its clock.
func TestSlowClockNodeDoesNotRewindStamp(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 2, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		reading *clockoffset.Reading // the slow node's; nil: never measured
		reason  string
	}{
		{"clock not measured", nil, "not measured"},
		{"clock measured 11 minutes behind", &clockoffset.Reading{OffsetSeconds: 660, MeasuredAt: now.Add(-11*time.Minute - 30*time.Second)}, "11m0s off the core API's"},
		{"measurement stale", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: now.Add(-11*time.Minute - ClockFresh - time.Second)}, "not within 15m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := setupWith(t, "echo x >> ran", "0 * * * * *", now) // node1 runs 12:00 at 12:00:02
			if code := Run(env); code != 0 {
				t.Fatalf("exit %d", code)
			}
			slow := otherNode(t, env, "slow", now.Add(-11*time.Minute)) // its clock says 11:49:02: fires 11:49
			if tt.reading != nil {
				slow = withClock(t, slow, *tt.reading)
			}
			if code := Run(slow); code != 1 {
				t.Errorf("slow node exit %d, want 1", code)
			}
			if r := record(t, slow); r.Kind != KindPlatformError || !strings.Contains(r.Reason, tt.reason) || !strings.Contains(r.Reason, "node slow") {
				t.Errorf("slow node record %+v: want a platform error naming its clock (%q)", r, tt.reason)
			}
			late := otherNode(t, env, "node2", now.Add(10*time.Second)) // correct clock, larger random delay
			if code := Run(late); code != ExitSkip {
				b, _ := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran"))
				t.Fatalf("12:00 ran twice (exit %d, webroot ran=%q)", code, b)
			}
		})
	}
}

// A run-now request that arrives while the job's service is active (the
// agent's StartUnit merges into the running start, whose runner decided
// before the request file existed) waits for "the next start". For a job
// that fires every minute every later start is a timely timer fire, which
// runs its slot, never the request; after RequestTTL the request is
// dropped: accepted by the API, never run, never reported.
func TestRunNowDuringARunIsNotLost(t *testing.T) {
	t.Skip("open: needs the agent to start the unit again after a merged start, or the runner to run a pending request after its slot; see review finding")
	t0 := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	env, _ := setupWith(t, "echo \"$HOSTCRON_RUN_KEY\" >> ran", "0 * * * * *", t0)
	env.ManualDir = t.TempDir()
	writeRequest(t, env.ManualDir, "99", t0) // written while the 12:00 run still runs
	for i := 1; i <= 6; i++ {
		at := t0.Add(time.Duration(i)*time.Minute - 28*time.Second) // 12:0i:02, timely
		n := otherNode(t, env, "node1", at)
		n.Start = Start{ByTimer: true}
		Run(n)
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran"))
	if want := id + "#manual#99"; !strings.Contains(string(b), want) {
		t.Fatalf("run-now request never ran; runs: %q", b)
	}
}

// CephFS evicts a client that stops answering (the flock goes to another
// node) and, with recover_session=clean, lets it reconnect while its
// command still runs. Node2 then holds the lock and stamps a later slot;
// the old holder's heartbeats and release must not write its own lease
// back over it: the stamp would go back to the old slot, and a node that
// fires node2's slot later in its window would run it a second time.
func TestHeartbeatNeverRewindsAnotherRunsStamp(t *testing.T) {
	env, locks := setup(t, "true")
	stamp := filepath.Join(locks, "cron-"+id+".slot")
	taken := `{"slot":"2026-11-21T12:00:20Z","holder":"node2","run_key":"` + id + `#scheduled#2026-11-21T12:00:20Z","heartbeat":"2026-11-21T12:00:21Z"}`
	// Node2 writes the way every runner does, whole (rename), between two
	// heartbeats of the old holder (a beat that reads the stamp just before
	// the rename and writes just after is the narrow race the docs name).
	setCommand(t, env, "sleep 0.15; printf '%s\\n' '"+taken+"' > "+stamp+".new && mv "+stamp+".new "+stamp+"; sleep 0.35")
	env.Heartbeat = 100 * time.Millisecond
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	st, ok, _, err := readStamp(stamp, env.Now())
	if err != nil || !ok || st.Holder != "node2" || !st.Slot.Equal(time.Date(2026, 11, 21, 12, 0, 20, 0, time.UTC)) {
		t.Fatalf("stamp after the old holder ended: %+v (ok %v, err %v): want node2's lease for 12:00:20", st, ok, err)
	}
	next := otherNode(t, env, "node3", time.Date(2026, 11, 21, 12, 0, 25, 0, time.UTC))
	setCommand(t, env, "touch ran")
	if Run(next); ran(t, next) {
		t.Fatal("12:00:20 ran again after the stamp was rewound")
	}
}
