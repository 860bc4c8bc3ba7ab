package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/jobspec"
)

// The tests below reproduce the faults of issue 11 on one machine: temp
// dirs stand in for shared storage, each Env is one node (its own runtime
// dir, name and clock).

func ran(t *testing.T, env Env) bool {
	t.Helper()
	b, _ := os.ReadFile(env.SpecPath)
	var spec jobspec.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	_, err := os.Stat(filepath.Join(spec.Webroot, "ran"))
	return err == nil
}

// otherNode is another node of the shard: same spec, lock dir and webroot,
// its own runtime dir, name and clock.
func otherNode(t *testing.T, env Env, name string, now time.Time) Env {
	env.RuntimeDir, env.Node, env.Now = t.TempDir(), name, func() time.Time { return now }
	env.ClockFile, env.Boot = "", nil // its own agent, its own kernel
	return env
}

// Defect (a): "0 12 * * *" edited at 14:00 restarts the timer, which
// starts the service at once; the 12:00 slot must not run.
func TestRestartedTimerDoesNotRunAPastSlot(t *testing.T) {
	env, _ := setupWith(t, "touch ran", "0 0 12 * * *", time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC))
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d, want %d", code, ExitSkip)
	}
	if r := record(t, env); r.Kind != KindLateFire || !strings.Contains(r.Reason, "late fire") || !Silent(r.Kind) {
		t.Errorf("record %+v", r)
	}
	if ran(t, env) {
		t.Error("the past slot ran")
	}
}

// Defect (b) and rule 2: node1 overruns the 12:00:00 slot; at 12:00:10
// node2 and node3 fire. Only the first reports the overlap, the second is
// silent, a node that gets the lock later in the slot does not run it, and
// node1's late start after its overrun is a late fire, so no real outcome
// ever shares a key with the skip.
func TestOverlapIsOneDecisionPerSlot(t *testing.T) {
	env, locks := setup(t, "touch ran") // node1, 12:00:13, slot 12:00:10
	holder := holdLock(t, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node1","run_key":"k","heartbeat":"2026-11-21T12:00:10Z"}`)
	now := env.Now()
	node2, node3 := otherNode(t, env, "node2", now), otherNode(t, env, "node3", now.Add(2*time.Second))
	if code := Run(node2); code != ExitSkip {
		t.Fatalf("node2 exit %d", code)
	}
	if r := record(t, node2); r.Kind != KindOverlap || r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" {
		t.Errorf("node2 (first loser) record %+v, want overlap", r)
	}
	if code := Run(node3); code != ExitSkip {
		t.Fatalf("node3 exit %d", code)
	}
	if r := record(t, node3); r.Kind != KindOverlapSeen || !Silent(r.Kind) {
		t.Errorf("node3 record %+v, want overlap_seen (silent)", r)
	}
	// The holder finishes; node4 gets the lock within the slot's window.
	holder.Close()
	node4 := otherNode(t, env, "node4", now.Add(5*time.Second))
	if code := Run(node4); code != ExitSkip || ran(t, node4) {
		t.Fatalf("node4 ran a slot decided a skip (exit %d)", code)
	}
	if r := record(t, node4); r.Kind != KindOverlapSeen {
		t.Errorf("node4 record %+v", r)
	}
	// systemd starts node1's service again the moment its overrun ends,
	// after the window (a minute schedule: the 10-second one has no gap).
	lateEnv, _ := setupWith(t, "touch ran", "0 * * * * *", time.Date(2026, 11, 21, 12, 1, 50, 0, time.UTC))
	if code := Run(lateEnv); code != ExitSkip || ran(t, lateEnv) {
		t.Fatalf("late start after an overrun ran (exit %d)", code)
	}
	if r := record(t, lateEnv); r.Kind != KindLateFire {
		t.Errorf("late start record %+v", r)
	}
	// The next slot's winner cleans the old marker and runs.
	next := otherNode(t, env, "node2", now.Add(10*time.Second))
	if code := Run(next); code != 0 || !ran(t, next) {
		t.Fatalf("next slot: exit %d", code)
	}
	if m, _ := filepath.Glob(filepath.Join(locks, "cron-"+id+".skip.*")); len(m) != 0 {
		t.Errorf("old skip markers left: %v", m)
	}
}

// Rule 6: a holder that stopped heart-beating (a crashed node whose flock
// CephFS keeps until it evicts the session) is a platform error, reported
// once, naming the holder.
func TestDeadLockHolderIsPlatformError(t *testing.T) {
	env, locks := setup(t, "touch ran")
	holdLock(t, locks, `{"slot":"2026-11-21T12:00:00Z","holder":"node3","run_key":"k","heartbeat":"2026-11-21T11:58:00Z"}`)
	if code := Run(env); code != ExitPlatformError {
		t.Fatalf("exit %d, want %d", code, ExitPlatformError)
	}
	r := record(t, env)
	if r.Kind != KindPlatformError || !strings.Contains(r.Reason, "lock holder node node3 stopped heart-beating at 2026-11-21T11:58:00Z") ||
		!strings.Contains(r.Reason, "node node1") {
		t.Errorf("record %+v", r)
	}
	other := otherNode(t, env, "node2", env.Now())
	if Run(other); record(t, other).Kind != KindOverlapSeen {
		t.Errorf("second node record %+v, want silent", record(t, other))
	}
}

// Rule 6: the running runner refreshes its lease, and releases it at the
// end.
func TestRunnerHeartbeats(t *testing.T) {
	env, locks := setup(t, "true")
	stamp := filepath.Join(locks, "cron-"+id+".slot")
	www := filepath.Join(filepath.Dir(locks), "www")
	setCommand(t, env, "touch started; while [ ! -e beaten ]; do sleep 0.01; done; cat "+stamp+" > beat")
	var n int
	var mu sync.Mutex
	base := env.Now()
	env.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); n++; return base.Add(time.Duration(n) * time.Second) }
	beats := make(chan chan struct{})
	env.beats = beats
	exit := make(chan int, 1)
	go func() { exit <- Run(env) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(www, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	ack := make(chan struct{})
	beats <- ack
	<-ack
	os.WriteFile(filepath.Join(www, "beaten"), nil, 0o600)
	if code := <-exit; code != 0 {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(filepath.Join(www, "beat"))
	var during Stamp
	if err != nil || json.Unmarshal(b, &during) != nil {
		t.Fatalf("stamp during the run: %q %v", b, err)
	}
	started := record(t, env).StartedAt // taken after the lease was first written
	if during.Holder != "node1" || during.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" || during.Released || !during.Heartbeat.After(*started) {
		t.Errorf("stamp during the run %+v: want a refreshed lease", during)
	}
	if after, ok, _, _ := readStamp(stamp, base); !ok || !after.Released || !after.Slot.Equal(during.Slot) {
		t.Errorf("stamp after the run %+v: want the lease released", after)
	}
}

func setCommand(t *testing.T, env Env, command string) {
	t.Helper()
	editSpec(t, env, func(s *jobspec.Spec) { s.Command = command })
}

// editSpec rewrites env's job spec as edit changes it.
func editSpec(t *testing.T, env Env, edit func(*jobspec.Spec)) {
	t.Helper()
	spec, err := jobspec.Read(env.SpecPath)
	if err != nil {
		t.Fatal(err)
	}
	edit(&spec)
	b, _ := spec.Marshal()
	if err := os.WriteFile(env.SpecPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// bootEpoch is when the test nodes' kernels booted, by true time.
var bootEpoch = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// testBoot is the boot id of the test nodes' kernels.
const testBoot = "b00t-1"

// withClock gives env the agent's clock measurement r. Unless r carries
// its boot time, it was taken by env's clock with no step since: the boot
// clock elapses with env's clock (bootAt sets one that does not).
func withClock(t *testing.T, env Env, r clockoffset.Reading) Env {
	t.Helper()
	if r.BootID == "" {
		r.BootID, r.Boottime = testBoot, r.MeasuredAt.Sub(bootEpoch)
	}
	if env.Boot == nil {
		now := env.Now
		env.Boot = func() (clockoffset.Boot, error) {
			return clockoffset.Boot{ID: testBoot, Time: now().Sub(bootEpoch)}, nil
		}
	}
	env.ClockFile = filepath.Join(t.TempDir(), "clock-offset.json")
	if err := clockoffset.WriteFile(env.ClockFile, r); err != nil {
		t.Fatal(err)
	}
	return env
}

// bootAt gives env a boot clock that reads trueNow (less bootEpoch): the
// node's wall clock may have been stepped, its boot clock was not.
func bootAt(env Env, trueNow time.Time) Env {
	env.Boot = func() (clockoffset.Boot, error) {
		return clockoffset.Boot{ID: testBoot, Time: trueNow.Sub(bootEpoch)}, nil
	}
	return env
}

// A node whose agent measured its clock 11 minutes fast names the slot of
// 12:11 at (true) 12:00: running it would run it early, and its stamp
// would silence the correct nodes until then. It runs nothing, stamps
// nothing and reports nothing (its record, silent, names its clock; the
// journal and the agent say it loudly).
func TestFastClockNodeDoesNotRun(t *testing.T) {
	trueNow := time.Date(2026, 11, 21, 12, 0, 2, 0, time.UTC)
	fast, locks := setupWith(t, "touch ran", "0 * * * * *", trueNow.Add(11*time.Minute))
	fast = withClock(t, fast, clockoffset.Reading{OffsetSeconds: -660, MeasuredAt: fast.Now().Add(-time.Minute)})
	if code := Run(fast); code != ExitSkip || ran(t, fast) {
		t.Fatalf("exit %d, ran %v: a node with a clock known 11 minutes off ran", code, ran(t, fast))
	}
	// Not an outcome of a slot: its key names 12:11, which the core
	// refuses (more than 5 minutes ahead), and a slow node's key would be
	// a correct node's, whose record it must never replace. Silent.
	if r := record(t, fast); r.Kind != KindClockRefused || !Silent(r.Kind) || !strings.Contains(r.Reason, "-11m0s off the core API's") {
		t.Errorf("record %+v: want a silent clock refusal naming the offset", r)
	}
	if _, err := os.Stat(filepath.Join(locks, "cron-"+id+".slot")); err == nil {
		t.Error("the fast node stamped its slot")
	}
	correct := otherNode(t, fast, "node2", trueNow)
	if code := Run(correct); code != 0 || !ran(t, correct) {
		t.Fatalf("the correct node did not run 12:00 (exit %d)", code)
	}
}

// Rule 4: a stamp far in the future is corrupt: a node whose clock the
// agent verified overwrites it, with a warning, so it cannot silence the job.
func TestFutureStampIsOverwritten(t *testing.T) {
	env, locks := setup(t, "touch ran")
	env = withClock(t, env, clockoffset.Reading{OffsetSeconds: 0.4, MeasuredAt: env.Now().Add(-time.Minute)})
	stamp := filepath.Join(locks, "cron-"+id+".slot")
	if err := os.WriteFile(stamp, []byte("2027-01-01T00:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := Run(env); code != 0 || !ran(t, env) {
		t.Fatalf("exit %d: a corrupt stamp must not stop the job", code)
	}
	if r := record(t, env); !strings.Contains(r.Warning, "ahead of this node's clock") {
		t.Errorf("record %+v: want a warning", r)
	}
	if st, ok, _, _ := readStamp(stamp, env.Now()); !ok || !st.Slot.Equal(time.Date(2026, 11, 21, 12, 0, 10, 0, time.UTC)) {
		t.Errorf("stamp %+v not overwritten", st)
	}
}

// Rule 5: shared storage faults are the platform's; a stamp that cannot be
// read means do not run.
func TestSharedStorageFaults(t *testing.T) {
	for _, tt := range []struct {
		name   string
		break_ func(locks string)
		want   string
	}{
		{"lock dir missing", func(l string) { os.RemoveAll(l) }, "lock dir"},
		{"stamp unreadable", func(l string) { os.Mkdir(filepath.Join(l, "cron-"+id+".slot"), 0o700) }, "read slot stamp"},
		{"run-now stamp unreadable", func(l string) { os.Mkdir(filepath.Join(l, "cron-"+id+".manual"), 0o700) }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, locks := setup(t, "touch ran")
			tt.break_(locks)
			code := Run(env)
			r := record(t, env)
			if tt.want == "" { // a scheduled run does not read the run-now stamp
				if code != 0 {
					t.Errorf("exit %d", code)
				}
				return
			}
			if code != ExitPlatformError || ran(t, env) || r.Kind != KindPlatformError || !strings.Contains(r.Reason, "node node1: "+tt.want) ||
				r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" {
				t.Errorf("exit %d, record %+v", code, r)
			}
		})
	}
}

// Rule 5: the record naming the run is written before shared storage is
// touched, so a run killed while storage hangs is reported under its key.
func TestRecordWrittenBeforeSharedStorage(t *testing.T) {
	env, locks := setup(t, "true")
	os.RemoveAll(locks)
	if err := os.Mkdir(locks, 0o700); err != nil {
		t.Fatal(err)
	}
	// A FIFO as the stamp blocks its reader like a hung mount.
	if err := mkfifo(filepath.Join(locks, "cron-"+id+".slot")); err != nil {
		t.Skip(err)
	}
	done := make(chan int, 1)
	go func() { done <- Run(env) }()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := ReadRecord(env.RuntimeDir); err == nil {
			if r.Kind != KindStarted || r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" || r.Node != "node1" || r.Version != 4 {
				t.Fatalf("record while hung %+v", r)
			}
			unblockFIFO(t, filepath.Join(locks, "cron-"+id+".slot"))
			<-done
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no record while the stamp read hangs")
}

// Rule 3: a run-now request is its own run, keyed by the request id, and
// runs once however often its service is started, on whichever node.
func TestRunNowRequestRunsOnce(t *testing.T) {
	now := time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC) // hourly job: 14:00 was its slot, an hour after 13:00
	env, _ := setupWith(t, "touch ran", "0 0 * * * *", now.Add(30*time.Minute))
	env.ManualDir = t.TempDir()
	writeRequest(t, env.ManualDir, "42", now.Add(30*time.Minute-2*time.Second))
	if code := Run(env); code != 0 || !ran(t, env) {
		t.Fatalf("exit %d", code)
	}
	if r := record(t, env); r.Kind != KindRan || r.RunKey != id+"#manual#42" || r.Trigger != "manual" {
		t.Errorf("record %+v", r)
	}
	// A re-sent signal, an activity retry on this node or another: silent.
	for _, n := range []Env{env, otherNode(t, env, "node2", env.Now().Add(time.Minute))} {
		if code := Run(n); code != ExitSkip {
			t.Errorf("%s: request ran again (exit %d)", n.Node, code)
		}
		if r := record(t, n); r.Kind != KindContention {
			t.Errorf("%s: record %+v", n.Node, r)
		}
	}
}

// Rule 3: a leftover request never replaces a timer fire; when the slot
// already ran elsewhere, the start was the request's.
func TestRunNowRequestAndTimerFire(t *testing.T) {
	env, _ := setup(t, "true") // 12:00:13, slot 12:00:10 is timely
	env.ManualDir = t.TempDir()
	env.Start = Start{ByTimer: true}
	writeRequest(t, env.ManualDir, "7", env.Now().Add(-time.Second))
	if Run(env); record(t, env).RunKey != id+"#scheduled#2026-11-21T12:00:10Z" {
		t.Fatalf("a timely fire ran %+v, want the slot", record(t, env))
	}
	if code := Run(env); code != 0 || record(t, env).RunKey != id+"#manual#7" {
		t.Fatalf("exit %d, record %+v: want the request once the slot ran", code, record(t, env))
	}
	if code := Run(env); code != ExitSkip {
		t.Errorf("third start: exit %d", code)
	}
}

func writeRequest(t *testing.T, dir, request string, at time.Time) {
	t.Helper()
	body := request + "\n" + at.UTC().Format(time.RFC3339) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "cron-acme-"+id), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

// unblockFIFO lets a reader blocked on the FIFO go on, with an old stamp.
func unblockFIFO(t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("2026-11-21T12:00:00Z\n")
	f.Close()
}
