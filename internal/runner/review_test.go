package runner

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
		trueNow bool                 // its boot clock reads true time (its wall clock was stepped, not its boot clock)
		reason  string
	}{
		{"clock not measured", nil, false, "not measured"},
		{"clock measured 11 minutes behind", &clockoffset.Reading{OffsetSeconds: 660, MeasuredAt: now.Add(-11*time.Minute - 30*time.Second)}, false, "11m0s off the core API's"},
		{"measurement stale", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: now.Add(-11*time.Minute - ClockVerifiedFresh - time.Second)}, false, "not within 2m0s"},
		// Measured in sync at true 11:46, then the agent stopped measuring
		// and the clock was stepped 11 minutes back (or the VM resumed
		// after an 11-minute pause with its old time): by its own clock the
		// reading is 3 minutes old and 0 s off. Boot time says 14 minutes,
		// and a step of -11 minutes since.
		{"clock stepped back after an in-sync reading", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: time.Date(2026, 11, 21, 11, 46, 0, 0, time.UTC),
			BootID: testBoot, Boottime: time.Date(2026, 11, 21, 11, 46, 0, 0, time.UTC).Sub(bootEpoch)}, true, "stepped by -11m0s"},
		// The same step right after a measurement 30 s before: young by
		// any clock, but the step shows.
		{"clock stepped back right after an in-sync reading", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: now.Add(-30 * time.Second),
			BootID: testBoot, Boottime: now.Add(-30 * time.Second).Sub(bootEpoch)}, true, "stepped by -11m0s"},
		{"reading of an earlier boot", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: now.Add(-11*time.Minute - 30*time.Second),
			BootID: "earlier", Boottime: time.Hour}, false, "before the node's last boot"},
		{"reading of an older agent (no boot time)", &clockoffset.Reading{OffsetSeconds: 0, MeasuredAt: now.Add(-11*time.Minute - 30*time.Second),
			BootID: "", Boottime: 0}, false, "no boot time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := setupWith(t, "echo x >> ran", "0 * * * * *", now) // node1 runs 12:00 at 12:00:02
			if code := Run(env); code != 0 {
				t.Fatalf("exit %d", code)
			}
			slow := otherNode(t, env, "slow", now.Add(-11*time.Minute)) // its clock says 11:49:02: fires 11:49
			if tt.trueNow {
				slow = bootAt(slow, now)
			}
			if tt.reading != nil {
				slow = withClock(t, slow, *tt.reading)
				if tt.reading.BootID == "" && tt.name == "reading of an older agent (no boot time)" {
					if err := clockoffset.WriteFile(slow.ClockFile, *tt.reading); err != nil { // as written, without boot time
						t.Fatal(err)
					}
				}
			}
			// A clock measured more than MaxSkew off does not contend at all
			// (silent, exit ExitSkip: its key, 11:49, may be a correct
			// node's record); one it cannot vouch for fails closed at the
			// stamp (a platform error, exit ExitPlatformError).
			want, wantExit := KindPlatformError, ExitPlatformError
			if strings.Contains(tt.name, "measured 11 minutes behind") {
				want, wantExit = KindClockRefused, ExitSkip
			}
			if code := Run(slow); code != wantExit {
				t.Errorf("slow node exit %d, want %d", code, wantExit)
			}
			if r := record(t, slow); r.Kind != want || !strings.Contains(r.Reason, tt.reason) || !strings.Contains(r.Reason, "node slow") {
				t.Errorf("slow node record %+v: want %s naming its clock (%q)", r, want, tt.reason)
			}
			late := otherNode(t, env, "node2", now.Add(10*time.Second)) // correct clock, larger random delay
			if code := Run(late); code != ExitSkip {
				b, _ := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran"))
				t.Fatalf("12:00 ran twice (exit %d, webroot ran=%q)", code, b)
			}
		})
	}
}

// A run-now request that arrives while the job's service is active merges
// into the running start (StartUnit on an activating oneshot), whose runner
// decided before the request existed; for a job that fires every minute
// every later start is a timely timer fire, which runs its slot, never the
// request. The node agent therefore waits until the shard's stamps show
// the request taken (RequestDecided) and starts the service again once the
// start under way has ended (unitmgr.RunNow, tested there against this
// runner). The runner's part: timer fires keep running their slots and do
// not count as taking the request; the agent's start runs it, once.
func TestRunNowDuringARunIsNotLost(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	env, locks := setupWith(t, "echo \"$HOSTCRON_RUN_KEY\" >> ran", "0 * * * * *", t0)
	env.ManualDir = t.TempDir()
	writeRequest(t, env.ManualDir, "99", t0) // written while the 12:00 run still runs
	taken := func() bool {
		t.Helper()
		ok, err := RequestDecided(locks, os.Getuid(), id, "99")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for i := 1; i <= 3; i++ {
		n := otherNode(t, env, "node1", t0.Add(time.Duration(i)*time.Minute-28*time.Second)) // 12:0i:02, timely
		n.Start = Start{ByTimer: true}
		if Run(n); record(t, n).Trigger != "scheduled" || taken() {
			t.Fatalf("timer fire %d: record %+v, taken=%v: a timer fire runs its slot and leaves the request pending", i, record(t, n), taken())
		}
	}
	agent := otherNode(t, env, "node1", t0.Add(3*time.Minute-20*time.Second)) // the 12:03 run ended; the agent starts again
	if code := Run(agent); code != 0 || record(t, agent).RunKey != id+"#manual#99" || !taken() {
		t.Fatalf("agent's start: exit %d, record %+v, taken=%v", code, record(t, agent), taken())
	}
	if Run(agent); record(t, agent).Kind != KindContention {
		t.Fatalf("the request ran twice: %+v", record(t, agent))
	}
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(env.SpecPath), "www", "ran"))
	if got := strings.Count(string(b), id+"#manual#99"); got != 1 {
		t.Fatalf("request ran %d times; runs: %q", got, b)
	}
}

// What the agent reads of a tenant's lock dir is never followed or waited
// on: a FIFO or a symlink as the run-now stamp is an error, not a hang.
func TestRequestDecidedRefusesTrickFiles(t *testing.T) {
	locks := t.TempDir()
	stamp := filepath.Join(locks, "cron-"+id+".manual")
	if ok, err := RequestDecided(locks, os.Getuid(), id, "5"); ok || err != nil {
		t.Fatalf("no stamp: %v %v", ok, err)
	}
	if err := mkfifo(stamp); err != nil {
		t.Skip(err)
	}
	if _, err := RequestDecided(locks, os.Getuid(), id, "5"); err == nil {
		t.Error("a FIFO as the run-now stamp was read")
	}
	os.Remove(stamp)
	target := filepath.Join(t.TempDir(), "x")
	os.WriteFile(target, []byte(`["5"]`), 0o600)
	if err := os.Symlink(target, stamp); err != nil {
		t.Fatal(err)
	}
	if ok, err := RequestDecided(locks, os.Getuid(), id, "5"); ok || err == nil {
		t.Errorf("a symlinked run-now stamp was followed: %v %v", ok, err)
	}
	os.Remove(stamp)
	if err := os.WriteFile(filepath.Join(locks, "cron-"+id+".skip.m5"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := RequestDecided(locks, os.Getuid(), id, "5"); !ok || err != nil {
		t.Errorf("a request decided a skip is taken: %v %v", ok, err)
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
	www := filepath.Join(filepath.Dir(locks), "www")
	taken := `{"slot":"2026-11-21T12:00:20Z","holder":"node2","run_key":"` + id + `#scheduled#2026-11-21T12:00:20Z","heartbeat":"2026-11-21T12:00:21Z"}`
	// The command stands for the run: it waits for the test at each step.
	// Node2 writes the way every runner does, whole (rename), between two
	// heartbeats of the old holder (a beat that reads the stamp just before
	// the rename and writes just after is the narrow race the docs name).
	wait := func(f string) string { return "while [ ! -e " + f + " ]; do sleep 0.01; done; " }
	setCommand(t, env, "touch started; "+wait("swap")+
		"printf '%s\\n' '"+taken+"' > "+stamp+".new && mv "+stamp+".new "+stamp+"; touch swapped; "+wait("done"))
	beats := make(chan chan struct{})
	env.beats = beats
	beat := func() {
		ack := make(chan struct{})
		beats <- ack
		<-ack
	}
	await := func(f string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(www, f)); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the command never got to %s", f)
			}
		}
	}
	var base = env.Now()
	var n time.Duration
	var mu sync.Mutex
	env.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); n++; return base.Add(n * time.Second) }
	exit := make(chan int, 1)
	go func() { exit <- Run(env) }()
	await("started")
	beat() // its own lease: renewed
	if st, ok, _, _ := readStamp(stamp, base); !ok || st.Holder != "node1" || !st.Heartbeat.After(base.Add(time.Second)) {
		t.Fatalf("stamp after a beat of its own run: %+v", st)
	}
	os.WriteFile(filepath.Join(www, "swap"), nil, 0o600)
	await("swapped")
	beat() // node2's lease now: not touched
	beat()
	os.WriteFile(filepath.Join(www, "done"), nil, 0o600) // the release follows
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d", code)
	}
	st, ok, _, err := readStamp(stamp, base)
	if err != nil || !ok || st.Holder != "node2" || !st.Slot.Equal(time.Date(2026, 11, 21, 12, 0, 20, 0, time.UTC)) {
		t.Fatalf("stamp after the old holder ended: %+v (ok %v, err %v): want node2's lease for 12:00:20", st, ok, err)
	}
	next := otherNode(t, env, "node3", time.Date(2026, 11, 21, 12, 0, 25, 0, time.UTC))
	setCommand(t, env, "touch ran")
	if Run(next); ran(t, next) {
		t.Fatal("12:00:20 ran again after the stamp was rewound")
	}
}

// A holder CephFS evicted and that reconnected, whose clock is more than
// MaxSkew slow, reads the new holder's stamp as "in the future": its
// heartbeat or release must still not write its own (older) lease over
// it, which would rewind the stamp so the new holder's slot runs again.
// Only a stamp that names this very run is renewed.
func TestHeartbeatOfSlowEvictedHolderNeverRewindsAFutureStamp(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 2, 0, time.UTC)
	env, locks := setupWith(t, "true", "0 * * * * *", now)
	stamp := filepath.Join(locks, "cron-"+id+".slot")
	// correct node2 took over and runs 12:00
	taken := Stamp{Slot: now.Truncate(time.Minute), Holder: "node2", RunKey: id + "#scheduled#2026-11-21T12:00:00Z", Heartbeat: now}
	if err := writeStamp(stamp, taken); err != nil {
		t.Fatal(err)
	}
	slow := otherNode(t, env, "slow", now.Add(-11*time.Minute))
	slow.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	lease := Stamp{Slot: time.Date(2026, 11, 21, 11, 49, 0, 0, time.UTC), Holder: "slow", RunKey: id + "#scheduled#2026-11-21T11:49:00Z", Heartbeat: slow.Now()}
	if err := renewLease(slow, stamp, lease); err == nil {
		t.Error("the heartbeat of a run whose stamp was taken over succeeded")
	}
	release(slow, stamp, lease)
	if st, ok, _, _ := readStamp(stamp, now); !ok || st.Holder != "node2" || !st.Slot.Equal(taken.Slot) {
		t.Fatalf("stamp %+v after the slow holder's heartbeat and release: want node2's", st)
	}
	// Nor does it write over a stamp that is gone or corrupt: neither is its own.
	for _, content := range []string{"", "garbage"} {
		os.Remove(stamp)
		if content != "" {
			os.WriteFile(stamp, []byte(content), 0o600)
		}
		if err := renewLease(slow, stamp, lease); err == nil {
			t.Errorf("stamp %q: the lease was written", content)
		}
	}
}

// The tenant owns the lock dir's parent, so it can put a symlink (or a
// directory of another owner) where the lock dir was; root must not look
// at files of fixed names wherever that points.
func TestRequestDecidedRefusesAForeignLockDir(t *testing.T) {
	base := t.TempDir()
	elsewhere := filepath.Join(base, "root-only")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "cron-"+id+".manual"), []byte(`["5"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	locks := filepath.Join(base, ".locks")
	if err := os.Symlink(elsewhere, locks); err != nil {
		t.Fatal(err)
	}
	if ok, err := RequestDecided(locks, os.Getuid(), id, "5"); ok || err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked lock dir: decided=%v err=%v", ok, err)
	}
	// Not the tenant's: the real directory, but owned by another uid.
	if ok, err := RequestDecided(elsewhere, os.Getuid()+1, id, "5"); ok || err == nil || !strings.Contains(err.Error(), "owned by uid") {
		t.Errorf("lock dir of another owner: decided=%v err=%v", ok, err)
	}
	if ok, err := RequestDecided(elsewhere, os.Getuid(), id, "5"); !ok || err != nil {
		t.Errorf("the tenant's own lock dir: decided=%v err=%v", ok, err)
	}
}
