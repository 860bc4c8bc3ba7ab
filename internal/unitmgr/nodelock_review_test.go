package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// queuedStarts is systemd where a timer's start job waits (an OnCalendar
// timer is ordered After=time-sync.target: at boot, with a time-wait-sync
// service, the job stays queued until the clock is synchronised): a start
// leaves the timer loaded and inactive with a job queued; a stop cancels
// the queued job; sync runs every queued start job.
type queuedStarts struct {
	*fakeSystemd
	qmu     sync.Mutex
	pending map[string]bool
}

func (q *queuedStarts) StartUnit(_ context.Context, n string) error {
	q.record("start(queued) %s", n)
	q.qmu.Lock()
	q.pending[n] = true
	q.qmu.Unlock()
	return nil
}

func (q *queuedStarts) StartUnits(ctx context.Context, names []string) error {
	for _, n := range names {
		_ = q.StartUnit(ctx, n)
	}
	return nil
}

func (q *queuedStarts) StopUnit(ctx context.Context, n string) error {
	q.qmu.Lock()
	delete(q.pending, n) // a stop job replaces the queued start job
	q.qmu.Unlock()
	return q.fakeSystemd.StopUnit(ctx, n)
}

func (q *queuedStarts) ListUnits(ctx context.Context, states, patterns []string) ([]LoadedUnit, error) {
	out, err := q.fakeSystemd.ListUnits(ctx, states, patterns)
	q.qmu.Lock()
	defer q.qmu.Unlock()
	for n := range q.pending {
		u := LoadedUnit{Name: n, LoadState: "loaded", ActiveState: "inactive", JobType: "start"} // a queued job: still inactive
		if listed(u, states, patterns) {
			out = append(out, u)
		}
	}
	return out, err
}

// sync: time-sync.target is reached, every queued start job runs.
func (q *queuedStarts) sync() {
	q.qmu.Lock()
	defer q.qmu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	for n := range q.pending {
		q.active[n] = true
	}
	q.pending = map[string]bool{}
}

// A job disabled while its timer's start job is still queued: the
// disable is reported applied, but the queued start job runs later and
// the disabled job's timer fires.
func TestDisableStopsATimerWhoseStartIsQueued(t *testing.T) {
	m, f := testManager(t)
	q := &queuedStarts{fakeSystemd: f, pending: map[string]bool{}}
	m.sys = q
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Apply(ctx, []wire.Job{job(idA, version(2), disabled)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("disable report: disabled=%v specs=%v calls=%q", rep.Disabled, rep.Specs, f.Calls())
	q.sync()
	timer := job(idA).UnitName() + ".timer"
	f.mu.Lock()
	active := f.active[timer]
	f.mu.Unlock()
	if active {
		t.Errorf("%s is active after its job was disabled (the start job queued before the disable ran after it)", timer)
	}
}

// A disable whose lock directory step fails (shared storage briefly
// away) stops and disables the timer but leaves the spec at the old
// version; a converge whose set was read before the disable then
// re-applies the old, enabled version, which the node can no longer tell
// older, and starts the disabled job's timer again.
func TestDisableWithoutLockDirStillRecordsItsVersion(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	v1 := job(idA)
	if _, err := m.Apply(ctx, []wire.Job{v1}); err != nil {
		t.Fatal(err)
	}
	// Shared storage away: the lock dir is not seen and cannot be made.
	m.lockDirOK = func(string, string, string) bool { return false }
	m.lockDir = func(string, string, string) error { return errors.New("transport endpoint is not connected") }
	rep, err := m.Apply(ctx, []wire.Job{job(idA, version(2), disabled)})
	t.Logf("disable: err=%v failed=%v disabled=%v specs=%v", err, rep.Failed, rep.Disabled, rep.Specs)
	timer := v1.UnitName() + ".timer"
	f.mu.Lock()
	afterDisable := f.active[timer]
	f.mu.Unlock()
	if afterDisable {
		t.Fatalf("timer still active right after the disable")
	}
	// Storage back; a converge read before the disable (V1, enabled) arrives.
	m.lockDirOK = func(string, string, string) bool { return true }
	m.lockDir = func(string, string, string) error { return nil }
	crep, err := m.Reconcile(ctx, wire.DesiredSet{Jobs: []wire.Job{v1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stale converge: kept=%v enabled=%v written=%v", crep.Kept, crep.Enabled, crep.Written)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active[timer] {
		t.Errorf("the disabled job's timer %s was started again by a converge older than the disable", timer)
	}
}

// The one-shot commands (`node-agent apply`, `reconcile`, `remove`,
// `burst`) open a Manager of their own in their own process: the node's
// unit lock (nodeLock) orders their observe, plan and apply with the
// daemon's, so an operator's older copy of a job planned before the
// core's newer one landed is not written over it.
func TestOneShotCommandAndDaemonTakeTurns(t *testing.T) {
	daemon, f := testManager(t)
	daemonWaitsForCommand(t, daemon, f, "the command held its plan")
}

// daemonWaitsForCommand runs a one-shot command (a Manager of its own on
// the same node) applying job A version 1; once the command has planned,
// the daemon applies the core's version 2. The daemon must wait for the
// command's lock and plan, so version 2 is what stays installed; what
// says when the daemon did not wait.
func daemonWaitsForCommand(t *testing.T, daemon *Manager, f *fakeSystemd, what string) {
	t.Helper()
	cli := New(f, daemon.layout.UnitDir, daemon.layout.Paths, daemon.log)
	cli.lockDir, cli.lockDirOK, cli.now = daemon.lockDir, daemon.lockDirOK, daemon.now
	ctx := context.Background()
	daemonDone := make(chan error, 1)
	var once atomic.Bool // planned runs in the command's drain and the daemon's
	planned = func() {
		if once.Swap(true) {
			return
		}
		go func() {
			_, err := daemon.Apply(ctx, []wire.Job{job(idA, version(2))})
			daemonDone <- err
		}()
		select {
		case err := <-daemonDone:
			daemonDone <- err
			t.Errorf("the daemon applied while %s (err %v)", what, err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	t.Cleanup(func() { planned = func() {} })
	if _, err := cli.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	err := <-daemonDone
	planned = func() {} // the daemon's drain is done with it
	if err != nil {
		t.Fatal(err)
	}
	obs, err := daemon.observe(ctx, Request{Op: OpApply, Jobs: []wire.Job{job(idA)}})
	if err != nil {
		t.Fatal(err)
	}
	if v := obs.Disk[job(idA).UnitName()].Installed.Version; v != 2 {
		t.Errorf("installed spec is version %d after the daemon applied version 2 behind the command (the command's older copy won)", v)
	}
}

// testLock is a nodeLock in dir, logging nowhere.
func testLock(dir string, patience time.Duration) nodeLock {
	return nodeLock{path: filepath.Join(dir, lockFileName), turn: filepath.Join(dir, turnFileName),
		without: filepath.Join(dir, withoutFileName), patience: patience,
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// A waiter for the node's unit lock gives up when its context ends, and
// takes the lock once it is free.
func TestUnitLockWaiterGivesUp(t *testing.T) {
	l := testLock(filepath.Join(t.TempDir(), "specs"), 0)
	unlock, err := l.take(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.take(ctx, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: %v, want the context's deadline", err)
	}
	unlock()
	again, err := l.take(context.Background(), nil)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again()
}

// Found by review: an operator's one-shot command stopped (Ctrl-Z, a
// debugger) while it holds the node's unit lock held the daemon's drain,
// which waits without a deadline, and with it every change of the core,
// disables included, for as long as it stayed stopped. The daemon's wait
// is bounded below a change's deadline (daemonLockPatience 30 s against
// the activity's 60 s; here 1 minute = 1 s), and with the lock held past
// it the daemon looks at the lock once a change (claimWithout): the next
// changes do not wait again (the converge below, two takes in one
// deadline, would not fit otherwise).
func TestStoppedCommandDelaysTheDaemonOnlyByItsPatience(t *testing.T) {
	const minute = time.Second
	daemon, f := testManager(t)
	daemon.SetLockPatience(minute / 2)
	ctx := context.Background()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA), job(idB)}); err != nil {
		t.Fatal(err)
	}
	command := testLock(daemon.layout.Paths.SpecDir, 0) // another process's open file: flock orders it like one
	unlock, err := command.take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()                          // the command stays stopped throughout
	for _, id := range []string{idA, idB} { // the second finds the give-up
		actx, cancel := context.WithTimeout(ctx, minute) // the activity's StartToClose
		_, err := daemon.Apply(actx, []wire.Job{job(id, version(2), disabled)})
		cancel()
		if err != nil {
			t.Fatalf("disable of %s behind a stopped command: %v", id, err)
		}
	}
	// A converge: its fast path's check and its reconcile both take the lock.
	cctx, cancel := context.WithTimeout(ctx, minute)
	defer cancel()
	if _, _, err := daemon.ReconcileUnchanged(cctx, func(context.Context) (wire.DesiredDigest, error) { return wire.DesiredDigest{}, nil }); err != nil {
		t.Fatalf("fast path behind a stopped command: %v", err)
	}
	if _, err := daemon.Reconcile(cctx, wire.DesiredSet{Jobs: []wire.Job{job(idA, version(2), disabled), job(idB, version(2), disabled)}}); err != nil {
		t.Fatalf("converge behind a stopped command: %v", err)
	}
	f.mu.Lock()
	for _, id := range []string{idA, idB} {
		if f.active[job(id).UnitName()+".timer"] {
			t.Errorf("the disabled job %s's timer still runs", id)
		}
	}
	f.mu.Unlock()
	// The command ends: the daemon takes the lock again, and holds it.
	unlock()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA, version(3), disabled)}); err != nil {
		t.Fatal(err)
	}
	if daemon.goesWithoutLock() {
		t.Error("the daemon still goes without the lock after the command ended")
	}
}

// Found by review: a command stopped while it waited (not while it held
// the lock) kept the turnstile with the lock free, and held every other
// command back for good. Past turnPatience a waiter tries the lock
// itself.
func TestStoppedWaiterOnTheTurnstileHoldsNobodyBack(t *testing.T) {
	old := turnPatience
	turnPatience = 50 * time.Millisecond
	t.Cleanup(func() { turnPatience = old })
	daemon, f := testManager(t)
	ctx := context.Background()
	turn, err := openLockFile(daemon.layout.turnPath()) // the stopped waiter's turnstile
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	if got, err := tryFlock(turn); !got || err != nil {
		t.Fatalf("turnstile: %v %v", got, err)
	}
	cli := New(f, daemon.layout.UnitDir, daemon.layout.Paths, daemon.log) // no patience: waits as long as it takes
	cli.lockDir, cli.lockDirOK, cli.now = daemon.lockDir, daemon.lockDirOK, daemon.now
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Apply(cctx, []wire.Job{job(idB)}); err != nil {
		t.Errorf("a command behind a stopped waiter, the lock free: %v", err)
	}
}

// Every path releases what it took: no descriptor left open, the lock
// free afterwards.
func TestNodeLockLeavesNoDescriptor(t *testing.T) {
	daemon, _ := testManager(t)
	daemon.SetLockPatience(50 * time.Millisecond)
	ctx := context.Background()
	count := func() int { es, _ := os.ReadDir("/proc/self/fd"); return len(es) }
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	before := count()
	for i := range 20 {
		if _, err := daemon.Apply(ctx, []wire.Job{job(idA, version(int64(i+2)))}); err != nil {
			t.Fatal(err)
		}
		if _, err := daemon.Plan(ctx, Request{Op: OpApply, Jobs: []wire.Job{job(idA)}}); err != nil {
			t.Fatal(err)
		}
	}
	unlock, _ := testLock(daemon.layout.Paths.SpecDir, 0).take(ctx, nil) // the patience and give-up paths
	for i := range 3 {
		if _, err := daemon.Apply(ctx, []wire.Job{job(idA, version(int64(i+100)))}); err != nil {
			t.Fatal(err)
		}
	}
	unlock()
	if after := count(); after > before+2 { // slack for the runtime's own
		t.Errorf("open descriptors %d -> %d", before, after)
	}
	l, err := openLockFile(daemon.layout.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, err := tryFlock(l); !got || err != nil {
		t.Errorf("the node's lock is held after every release: %v %v", got, err)
	}
}

// Found by review: the lock was taken by polling alone, and a manager that
// releases it and takes it again at once (a command's burst applied back
// to back) starved the other's poll; the turnstile gives the waiter the
// next turn. Here a command applies changes with 4 workers while the
// daemon disables a job: the daemon gets in after a batch or two of the
// command's.
func TestTurnstileGivesTheWaiterItsTurn(t *testing.T) {
	daemon, f := testManager(t)
	cli := New(f, daemon.layout.UnitDir, daemon.layout.Paths, daemon.log)
	cli.lockDir, cli.lockDirOK, cli.now = daemon.lockDir, daemon.lockDirOK, daemon.now
	ctx := context.Background()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var applied atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%08d-0000-4000-8000-%012d", w, i%50)
				if _, err := cli.Apply(ctx, []wire.Job{job(id, version(int64(1+i/50)))}); err == nil {
					applied.Add(1)
				}
			}
		}()
	}
	for applied.Load() < 20 { // the command's burst is under way
		time.Sleep(time.Millisecond)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	before := applied.Load()
	_, err := daemon.Apply(dctx, []wire.Job{job(idA, version(2), disabled)})
	during := applied.Load() - before
	cancel()
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the daemon never got the node's lock while a command applied back to back: %v", err)
	}
	// The batch under way when the daemon came, and the one whose lock
	// try it overtook at most (4 changes a batch); without the turnstile
	// hundreds went ahead of it.
	if during > 12 {
		t.Errorf("the command applied %d changes while the daemon waited for its turn", during)
	}
}

// Found by review: the give-up outlived the stopped command; a later,
// ordinary command holding the lock was then raced (the daemon applied
// while the command held its plan, and the command wrote its older copy
// over the daemon's newer). The later command writes a tenure of its
// own: a new holder, waited for anew.
func TestGiveUpEndsWhenTheStoppedCommandDoes(t *testing.T) {
	daemon, f := testManager(t)
	daemon.SetLockPatience(time.Second) // longer than the later command holds its plan (300 ms)
	ctx := context.Background()
	stopped := testLock(daemon.layout.Paths.SpecDir, 0)
	unlock, err := stopped.take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A core change behind the stopped command: the daemon gives up.
	if _, err := daemon.Apply(ctx, []wire.Job{job(idB)}); err != nil {
		t.Fatal(err)
	}
	if !daemon.goesWithoutLock() {
		t.Fatal("no give-up")
	}
	unlock() // the stopped command is resumed (or killed) and ends

	daemonWaitsForCommand(t, daemon, f, "a later, running command held the lock and its plan")
}

// Found by review: a node timeout below the daemon's patience (the flow
// and acceptance tiers run 15 s) timed out every attempt of a change
// behind a stopped command, each waiting the patience anew. The patience
// counts from the first wait that found the lock held: a retry of the
// change goes through once the lock has been held that long, whatever its
// node timeout. Scale: 15 s node timeout = T, patience 30 s = 2T.
func TestStoppedCommandDelaysAShortNodeTimeoutByThePatience(t *testing.T) {
	const T = 300 * time.Millisecond
	daemon, f := testManager(t)
	daemon.SetLockPatience(2 * T)
	ctx := context.Background()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	unlock, err := testLock(daemon.layout.Paths.SpecDir, 0).take(ctx, nil) // a stopped command
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	began := time.Now()
	var errs []error
	for attempt := 1; attempt <= 6; attempt++ { // the core's retries
		actx, cancel := context.WithTimeout(ctx, T)
		_, err := daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)})
		cancel()
		errs = append(errs, err)
		if err == nil {
			break
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("attempt %d: %v, want the deadline's error (the core retries it)", attempt, err)
		}
		time.Sleep(T / 3) // the retry's backoff: the drain's wait ends meanwhile (nobody waits)
	}
	took := time.Since(began)
	t.Logf("attempts: %v in %s", errs, took)
	if errs[len(errs)-1] != nil {
		t.Fatalf("the disable never went through behind a stopped command: %v", errs)
	}
	if errs[0] == nil {
		t.Errorf("the first attempt went without the lock before the patience had passed")
	}
	if took < 2*T {
		t.Errorf("applied without the lock after %s, before the patience (%s)", took, 2*T)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active[job(idA).UnitName()+".timer"] {
		t.Error("the disabled job's timer still runs")
	}
}

func TestPastPatience(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		since    time.Time
		patience time.Duration
		want     bool
	}{
		{"a command's manager never goes without", now.Add(-time.Hour), 0, false},
		{"not known held", time.Time{}, 30 * time.Second, false},
		{"held for less than the patience", now.Add(-29 * time.Second), 30 * time.Second, false},
		{"held for the patience", now.Add(-30 * time.Second), 30 * time.Second, true},
		{"held across several waits", now.Add(-5 * time.Minute), 30 * time.Second, true},
		{"a holder seen after now (a clock step back): not yet", now.Add(time.Minute), 30 * time.Second, false},
	}
	for _, tc := range cases {
		if got := pastPatience(tc.since, now, tc.patience); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// goesWithoutLock reports whether the daemon goes without the node's
// lock now: it has been held past the patience.
func (m *Manager) goesWithoutLock() bool {
	return pastPatience(m.lockBusy.heldSince(), time.Now(), m.lockPatience)
}
