package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Found by review (df7e09e): patienceFor lets a caller with little
// deadline left collapse the daemon's 30 s patience to almost nothing,
// so the daemon gives up on an ordinary, running command (not a stopped
// one) and applies its change while the command holds the lock and its
// plan: the command's older copy is then written over the daemon's newer
// disable.
func TestANearDeadlineNeverGoesWithoutTheLock(t *testing.T) {
	daemon, f := testManager(t)
	daemon.SetLockPatience(30 * time.Second) // daemonLockPatience
	ctx := context.Background()
	cli := New(f, daemon.layout.UnitDir, daemon.layout.Paths, daemon.log)
	cli.lockDir, cli.lockDirOK, cli.now = daemon.lockDir, daemon.lockDirOK, daemon.now
	daemonDone := make(chan error, 1)
	var once atomic.Bool
	planned = func() {
		if once.Swap(true) {
			return
		}
		// The command (running, holding the lock for well under 30 s)
		// has planned version 1. A core disable arrives that already
		// spent most of its attempt in the queue: 400 ms left.
		go func() {
			actx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
			defer cancel()
			_, err := daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)})
			daemonDone <- err
		}()
		select {
		case err := <-daemonDone:
			daemonDone <- err
			if err == nil { // an error is safe: the core retries the change
				t.Errorf("the daemon applied while a running command held the lock and its plan (gave up %v)", daemon.goesWithoutLock())
			}
		case <-time.After(600 * time.Millisecond):
		}
	}
	t.Cleanup(func() { planned = func() {} })
	if _, err := cli.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	derr := <-daemonDone
	planned = func() {}
	if derr != nil {
		return // not applied, reported failed: retried, nothing lost
	}
	disableStays(t, daemon, f)
}

// disableStays checks that the core's disable of job A (version 2) is
// what the node has: installed, its timer stopped.
func disableStays(t *testing.T, daemon *Manager, f *fakeSystemd) {
	t.Helper()
	obs, err := daemon.observe(context.Background(), Request{Op: OpApply, Jobs: []wire.Job{job(idA)}})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	on := f.active[job(idA).UnitName()+".timer"]
	f.mu.Unlock()
	if v := obs.Disk[job(idA).UnitName()].Installed.Version; v != 2 || on {
		t.Errorf("after the core's disable (version 2), reported applied: installed version %d, timer active %v", v, on)
	}
}

// Found by review (df7e09e): "At least one try" (patienceFor) does
// not hold when another waiter holds the turnstile: with a patience under
// turnPatience the daemon never tries the lock, though it is free, and
// applies without it; the waiter on the turnstile takes the free lock at
// its next poll and applies concurrently.
func TestAShortDeadlineBehindTheTurnstileNeverGoesWithoutTheLock(t *testing.T) {
	daemon, _ := testManager(t)
	daemon.SetLockPatience(30 * time.Second)
	ctx := context.Background()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	turn, err := openLockFile(daemon.layout.turnPath()) // a command waiting, between two polls
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	if got, err := tryFlock(turn); !got || err != nil {
		t.Fatalf("turnstile: %v %v", got, err)
	}
	lockFreeDuringApply := make(chan bool, 1)
	var once atomic.Bool
	planned = func() {
		if once.Swap(true) {
			return
		}
		l, err := openLockFile(daemon.layout.LockPath())
		if err != nil {
			t.Error(err)
			return
		}
		defer l.Close()
		got, _ := tryFlock(l) // what the waiting command's next poll does
		lockFreeDuringApply <- got
	}
	t.Cleanup(func() { planned = func() {} })
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a 15 s node timeout, scaled
	defer cancel()
	if _, err := daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)}); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v, want the deadline's error (the core retries it)", err)
		}
		return // not applied, reported failed: retried, nothing lost
	}
	select {
	case free := <-lockFreeDuringApply:
		if free {
			t.Error("the daemon planned and applied without the node's lock while it was free (never tried it behind a turnstile waiter); another command could take it meanwhile")
		}
	default:
		t.Fatal("planned not called")
	}
}

// Found by review (df7e09e): one change with little deadline left
// (it may even leave before its batch) bounds the patience to half of it,
// and its give-up then holds for every later change until the lock is
// free: a fresh change with its whole deadline applies at once beside an
// ordinary command that holds the lock for a few seconds (a reconcile of
// many units), which the 30 s patience was meant to wait for.
func TestOneShortDeadlineLeavesLaterChangesWaiting(t *testing.T) {
	daemon, _ := testManager(t)
	daemon.SetLockPatience(30 * time.Second)
	ctx := context.Background()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	unlock, err := testLock(daemon.layout.Paths.SpecDir, 0).take(ctx, nil) // an ordinary command, running
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond) // a change at the end of its attempt
	_, _ = daemon.Apply(sctx, []wire.Job{job(idB)})
	cancel()
	time.Sleep(50 * time.Millisecond) // its drain ends
	done := make(chan error, 1)
	go func() {
		_, err := daemon.Apply(ctx, []wire.Job{job(idA, version(2), disabled)}) // a fresh change
		done <- err
	}()
	select {
	case err := <-done:
		t.Errorf("a fresh change applied at once beside a running command that holds the lock (err %v, gave up %v)", err, daemon.goesWithoutLock())
	case <-time.After(time.Second): // waits (the command would end within the patience)
		unlock()
		<-done
	}
}

// Found by review (51d7004): going without the lock ended where an apply
// began. A stopped command A holds the lock past the patience; the
// daemon starts its disable without the lock; A ends (fg/kill) during
// that apply, and an ordinary command B, waiting meanwhile, took the now
// free lock, observed before the daemon's writes and wrote after them:
// B (held for far less than the patience) overwrote the core's disable.
// The daemon's claim (claimWithout) sends B back until the apply ends.
func TestTheNextCommandWaitsForAnApplyWithoutTheLock(t *testing.T) {
	daemon, f := testManager(t)
	unlockA, err := testLock(daemon.layout.Paths.SpecDir, 0).take(context.Background(), nil) // stopped command A
	if err != nil {
		t.Fatal(err)
	}
	nextCommandDuringTheApplyWithout(t, daemon, f, unlockA) // A is resumed and ends
}

// nextCommandDuringTheApplyWithout has the daemon (patience 200 ms) go
// without the lock behind a stopped holder and disable job A (version 2);
// once the daemon has planned, the holder ends (holderEnds) and an
// ordinary command B applies version 1. B must wait for the daemon's
// apply: the disable stays.
func nextCommandDuringTheApplyWithout(t *testing.T, daemon *Manager, f *fakeSystemd, holderEnds func()) {
	t.Helper()
	daemon.SetLockPatience(200 * time.Millisecond)
	ctx := context.Background()
	cli := New(f, daemon.layout.UnitDir, daemon.layout.Paths, daemon.log)
	cli.lockDir, cli.lockDirOK, cli.now = daemon.lockDir, daemon.lockDirOK, daemon.now
	var calls atomic.Int32
	bPlanned := make(chan struct{})
	bDone := make(chan error, 1)
	planned = func() {
		switch calls.Add(1) {
		case 1: // the daemon's lockless plan (disable v2) is made
			if !claimed(daemon.layout.withoutPath()) {
				t.Error("the daemon goes without the lock unclaimed")
			}
			holderEnds()
			go func() { _, err := cli.Apply(ctx, []wire.Job{job(idA)}); bDone <- err }()
			select {
			case <-bPlanned: // B planned beside the daemon's apply: disableStays fails
			case <-time.After(500 * time.Millisecond): // B waits for the lock, as it must
			}
		case 2: // B holds the lock and has planned v1 from the state before the daemon's write
			close(bPlanned)
			time.Sleep(300 * time.Millisecond) // the daemon writes meanwhile
		}
	}
	t.Cleanup(func() { planned = func() {} })
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)}); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
	planned = func() {}
	disableStays(t, daemon, f)
}

// Found by review (51d7004): a command that releases the lock and takes
// it again at once (a burst's next batch, a command's drain with a
// backlog) while the daemon is not waiting (its change timed out, the
// retry's backoff) was a hand-over the watcher missed: the daemon's
// memory stayed at the first hold, and the retry went without the lock
// beside the second, which had lasted far less than the patience. Every
// take writes a tenure of its own: a new holder.
func TestALockTakenAgainIsANewHolder(t *testing.T) {
	const T = 300 * time.Millisecond // node timeout; patience 2T
	misses := 0
	const rounds = 10
	for r := 0; r < rounds; r++ {
		daemon, _ := testManager(t)
		daemon.SetLockPatience(2 * T)
		ctx := context.Background()
		cmd := testLock(daemon.layout.Paths.SpecDir, 0)
		unlock1, err := cmd.take(ctx, nil) // batch 1 of the command
		if err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, T)
		_, err = daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("first attempt: %v", err)
		}
		time.Sleep(T / 3)
		unlock1()
		unlock2, err := cmd.take(ctx, nil) // batch 2 at once
		if err != nil {
			t.Fatal(err)
		}
		second := time.Now()
		actx, cancel = context.WithTimeout(ctx, 2*T)
		_, err = daemon.Apply(actx, []wire.Job{job(idA, version(2), disabled)})
		cancel()
		if err == nil {
			misses++
			t.Logf("round %d: went without beside batch 2, held %s (patience %s)", r, time.Since(second).Round(time.Millisecond), 2*T)
		}
		unlock2()
	}
	if misses > 0 {
		t.Errorf("%d/%d rounds: the daemon went without the lock beside an ordinary hold shorter than the patience", misses, rounds)
	}
}

// The holder of the node's lock writes its tenure (process and time) into
// the lock file: every take a new one, which a waiter reads to tell a new
// holder from the one it first waited behind, and an operator reads to
// see who holds the lock. A lock file that cannot be written (a
// read-only spec dir) keeps the last tenure and the lock still works.
func TestTheLockFileSaysWhoHoldsIt(t *testing.T) {
	dir := t.TempDir()
	l := testLock(dir, 0)
	ctx := context.Background()
	var tenures []string
	for range 2 {
		unlock, err := l.take(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(l.path)
		if err != nil {
			t.Fatal(err)
		}
		unlock()
		tenures = append(tenures, string(b))
	}
	if !strings.HasPrefix(tenures[0], fmt.Sprintf("%010d ", os.Getpid())) || len(tenures[0]) != tenureLen {
		t.Errorf("tenure %q does not name this process in %d bytes", tenures[0], tenureLen)
	}
	if tenures[0] == tenures[1] {
		t.Errorf("two takes wrote the same tenure %q: a new holder would not be told from the old", tenures[0])
	}
	ro, err := os.Open(l.path) // as openLockFile opens it where it cannot be written
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	writeTenure(ro) // what a read-only spec dir leaves
	if got := readTenure(ro); got != tenures[1] {
		t.Errorf("a tenure that cannot be written: %q, want the last one %q", got, tenures[1])
	}
}

// claimWithout, the daemon's last look before it goes without the lock:
// the lock free is taken; a holder other than the one past the patience
// (it took the lock before the claim, so never saw it) is waited for
// anew; the same holder is gone without, the claim kept (every taker
// then lets the lock go again: tryLock) until the apply ends.
func TestClaimWithout(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	newWait := func(t *testing.T, heldBy string) *lockWait {
		t.Helper()
		n := testLock(dir, time.Second)
		n.busy = &lockBusy{since: time.Now().Add(-time.Minute), tenure: heldBy}
		return openWait(t, n)
	}
	t.Run("the lock free: taken", func(t *testing.T) {
		w := newWait(t, "a stale holder")
		if err := w.claimWithout(); err != nil {
			t.Fatalf("%v, want the lock taken", err)
		}
		if w.claim != nil || claimed(w.without) {
			t.Error("the claim outlived a take of the lock")
		}
		w.lock.Close()
	})
	holder := testLock(dir, 0)
	unlock, err := holder.take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	tenure, err := os.ReadFile(holder.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a new holder: waited for anew", func(t *testing.T) {
		w := newWait(t, "the holder the patience ran out on")
		if err := w.claimWithout(); !errors.Is(err, errNewHolder) {
			t.Fatalf("%v, want errNewHolder", err)
		}
		if w.claim != nil || claimed(w.without) {
			t.Error("the claim outlived a new holder")
		}
		if got := w.busy.tenure; got != string(tenure) {
			t.Errorf("the wait is behind %q, want the new holder %q", got, tenure)
		}
		if pastPatience(w.busy.heldSince(), time.Now(), w.patience) {
			t.Error("the new holder is past the patience at once")
		}
	})
	t.Run("the same holder: gone without, claimed", func(t *testing.T) {
		w := newWait(t, string(tenure))
		if err := w.claimWithout(); !errors.Is(err, errWithout) {
			t.Fatalf("%v, want errWithout", err)
		}
		if !claimed(w.without) {
			t.Fatal("going without, unclaimed: a next taker would plan beside the apply")
		}
		other := &lockWait{nodeLock: testLock(dir, 0), lock: w.lock}
		unlock() // the holder ends; a next command tries
		if got, err := other.tryLock(); got || err != nil {
			t.Errorf("a taker got the lock (%v, %v) while the daemon applies without it", got, err)
		}
		w.dropClaim() // the apply ends
		if got, err := other.tryLock(); !got || err != nil {
			t.Errorf("after the apply a taker did not get the free lock: %v, %v", got, err)
		}
	})
}

// Found by review (ee438e6): a taker stopped while it looked at the
// daemon's claim (then an flock taken shared) kept the daemon from its
// claim, and the daemon went without the lock unclaimed; the taker
// killed (kill %1) during that apply freed the lock, and an ordinary
// waiting command B, not the stopped one, found no claim and planned
// beside the daemon's apply. The look is F_OFD_GETLK now, which takes
// nothing: the stopped taker holds the lock alone, the daemon claims,
// and B waits for its apply.
func TestAKilledTakerLetsNoCommandPlanBesideTheDaemon(t *testing.T) {
	daemon, f := testManager(t)
	// Taker T: took the lock, wrote its tenure, stopped at its look at the claim.
	tlock, err := openLockFile(daemon.layout.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tryFlock(tlock); !got {
		t.Fatal("lock")
	}
	writeTenure(tlock)
	nextCommandDuringTheApplyWithout(t, daemon, f, func() { tlock.Close() }) // T is killed: the kernel drops its lock
}

// Found by review (0c42c66): in the poll where the daemon's wait has been overdue
// for 100 ms (since removed), `overdue` is computed before the try; the failed try
// then records a NEW holder's tenure (lockBusy.held resets since), and
// claimWithout compared the tenure read after the claim with the one just
// recorded: equal, so it went without beside a command that had held the
// lock for one poll (and looked at the claim before it was taken). It
// now goes without only behind a holder past the patience.
func TestANewHolderSeenInTheClaimingPollIsWaitedFor(t *testing.T) {
	const patience = 200 * time.Millisecond
	bad := 0
	const rounds = 10
	for r := 0; r < rounds; r++ {
		dir := t.TempDir()
		ctx := context.Background()
		unlockA, err := testLock(dir, 0).take(ctx, nil) // stopped command A
		if err != nil {
			t.Fatal(err)
		}
		d := testLock(dir, patience)
		d.busy = &lockBusy{}
		start := time.Now()
		type res struct {
			unlock func()
			at     time.Time
		}
		done := make(chan res, 1)
		go func() {
			u, err := d.take(ctx, nil)
			if err != nil {
				t.Error(err)
			}
			done <- res{u, time.Now()}
		}()
		// overdue, and the claiming poll, from ~start+patience.
		time.Sleep(time.Until(start.Add(patience - 8*time.Millisecond)))
		unlockA() // A resumed, ends
		lock, err := openLockFile(d.path)
		if err != nil {
			t.Fatal(err)
		}
		c := &lockWait{nodeLock: testLock(dir, 0), lock: lock} // command C's poll
		got, err := c.tryLock()
		if err != nil {
			t.Fatal(err)
		}
		if !got {
			// the daemon took the free lock first (fine) or claimed first
			rr := <-done
			rr.unlock()
			lock.Close()
			continue
		}
		cAt := time.Now()
		select {
		case rr := <-done:
			bad++
			t.Logf("round %d: daemon went without %s after C (running, not stopped) took the lock; claimed=%v",
				r, rr.at.Sub(cAt).Round(time.Millisecond), claimed(d.without))
			rr.unlock()
		case <-time.After(patience / 2):
			lock.Close() // C ends
			rr := <-done
			rr.unlock()
		}
		lock.Close()
	}
	if bad > 0 {
		t.Errorf("%d/%d rounds: the daemon went without the lock beside a new holder that held it for one poll", bad, rounds)
	}
}

// A taker writes its tenure before it looks at the claim, and the daemon
// reads the tenure after it took the claim: whichever comes first, the
// other sees it. Here the daemon claims right after a taker's look found
// no claim (lookedAtClaim): it must see the taker's tenure (a new holder)
// and not go without beside it. Swapping the taker's two steps fails
// this.
func TestTheTenureIsWrittenBeforeTheLookAtTheClaim(t *testing.T) {
	daemon, dir := behindAHolderThatEnded(t)
	var claimErr error
	lookedAtClaim = func() { claimErr = daemon.claimWithout() }
	t.Cleanup(func() { lookedAtClaim = func() {} })
	taker := openWait(t, testLock(dir, 0))
	got, err := taker.tryLock()
	if err != nil {
		t.Fatal(err)
	}
	if got && errors.Is(claimErr, errWithout) {
		t.Errorf("the taker holds the lock and the daemon goes without it beside the taker (claim: %v)", claimErr)
	}
	if !got || !errors.Is(claimErr, errNewHolder) {
		t.Errorf("taker got %v, daemon %v; want the taker holding the lock and the daemon waiting behind it", got, claimErr)
	}
}

// A drain waiting for the node's lock stops when every caller has left
// (their deadlines passed; the core retries them): it does not go on
// waiting, holding the turnstile, for a batch nobody waits for.
func TestTheDrainStopsWaitingWhenNobodyWaits(t *testing.T) {
	daemon, _ := testManager(t)
	daemon.SetLockPatience(time.Minute)
	ctx := context.Background()
	holder := testLock(daemon.layout.Paths.SpecDir, 0)
	unlock, err := holder.take(ctx, nil) // an ordinary command, running
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = daemon.Apply(actx, []wire.Job{job(idA)})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want the deadline's error", err)
	}
	turn, err := openLockFile(holder.turn)
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		daemon.q.mu.Lock()
		draining := daemon.q.draining
		daemon.q.mu.Unlock()
		if got, _ := tryFlock(turn); got && !draining {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the drain still waits for the lock (draining %v) with nobody waiting", draining)
		}
	}
}

// Past its patience behind a stopped holder, the daemon looks at the lock
// directly, not behind a command waiting on the turnstile (which would
// cost each change turnPatience).
func TestPastThePatienceTheTurnstileIsNoDetour(t *testing.T) {
	old := turnPatience
	turnPatience = 2 * time.Second
	t.Cleanup(func() { turnPatience = old })
	daemon, _ := testManager(t)
	daemon.SetLockPatience(200 * time.Millisecond)
	ctx := context.Background()
	stopped := testLock(daemon.layout.Paths.SpecDir, 0)
	unlock, err := stopped.take(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	turn, err := openLockFile(stopped.turn) // a command waiting behind the stopped one
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	if got, err := tryFlock(turn); !got || err != nil {
		t.Fatalf("turnstile: %v %v", got, err)
	}
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA)}); err != nil { // waits turnPatience, then the patience
		t.Fatal(err)
	}
	began := time.Now()
	if _, err := daemon.Apply(ctx, []wire.Job{job(idA, version(2), disabled)}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= turnPatience {
		t.Errorf("a change past the patience took %s: it waited on the turnstile (%s)", took, turnPatience)
	}
}

// The daemon's half of the order: it reads the tenure after its claim. A
// taker that takes the lock, writes its tenure and looks (no claim yet)
// just before the daemon claims is a new holder; reading the tenure
// before the claim fails this. (Found by review, 2a1c784: untested.)
func TestTheDaemonReadsTheTenureAfterItsClaim(t *testing.T) {
	daemon, dir := behindAHolderThatEnded(t)
	taker := openWait(t, testLock(dir, 0))
	var got bool
	claiming = func() { got, _ = taker.tryLock() } // the taker's whole take, just before the claim
	t.Cleanup(func() { claiming = func() {} })
	err := daemon.claimWithout()
	claiming = func() {}
	if !got || !errors.Is(err, errNewHolder) {
		t.Errorf("taker got %v, daemon %v; want the taker holding the lock and the daemon waiting behind it", got, err)
	}
}

// A taker stopped inside its look at the claim holds nothing on the claim
// file (F_OFD_GETLK): the daemon past its patience behind it claims. (The
// fourth review's finding as its own test: a look that took an flock
// shared kept the daemon from claiming.)
func TestATakerStoppedInItsLookDoesNotBlockTheClaim(t *testing.T) {
	dir := t.TempDir()
	n := testLock(dir, time.Second)
	n.busy = &lockBusy{}
	n.busy.makeClaimFile(n.without)
	daemon := openWait(t, n)
	taker := openWait(t, testLock(dir, 0))
	var claimErr error
	var held bool
	lookedAtClaim = func() { // the taker is stopped here, past the patience
		lookedAtClaim = func() {}
		n.busy.since, n.busy.tenure = time.Now().Add(-time.Minute), readTenure(daemon.lock)
		claimErr = daemon.claimWithout()
		held = daemon.claim != nil
	}
	t.Cleanup(func() { lookedAtClaim = func() {} })
	if _, err := taker.tryLock(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(claimErr, errWithout) || !held {
		t.Errorf("daemon behind a taker stopped in its look: %v, claim held %v; want errWithout with the claim", claimErr, held)
	}
}

// A claim another process holds (a second daemon, applying without the
// lock) is waited out like a new holder, never gone without beside; the
// daemon makes the claim file at its first take.
func TestAClaimHeldElsewhereIsWaitedOut(t *testing.T) {
	daemon, _ := testManager(t)
	daemon.SetLockPatience(time.Second)
	if _, err := daemon.Apply(context.Background(), []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(daemon.layout.withoutPath(), os.O_RDWR, 0) // made at the first take
	if err != nil {
		t.Fatalf("no claim file after the daemon's first take: %v", err)
	}
	defer other.Close()
	if err := setClaim(other); err != nil {
		t.Fatal(err)
	}
	n := daemon.nodeLock()
	n.busy = &lockBusy{since: time.Now().Add(-time.Minute), tenure: "a stopped holder"}
	w := openWait(t, n)
	if err := w.claimWithout(); !errors.Is(err, errNewHolder) {
		t.Errorf("%v, want errNewHolder (waited out)", err)
	}
	if w.claim != nil {
		t.Error("claimed beside another's claim")
	}
}

// openWait is a wait for n's lock on a descriptor of its own.
func openWait(t *testing.T, n nodeLock) *lockWait {
	t.Helper()
	lock, err := openLockFile(n.path)
	if err != nil {
		t.Fatal(err)
	}
	w := &lockWait{nodeLock: n, began: time.Now(), lock: lock}
	t.Cleanup(func() { w.dropClaim(); lock.Close() })
	return w
}

// behindAHolderThatEnded is the daemon's wait past its patience behind a
// holder that has since let the lock go (its tenure still in the file),
// and the dir of the lock.
func behindAHolderThatEnded(t *testing.T) (*lockWait, string) {
	t.Helper()
	dir := t.TempDir()
	stopped := testLock(dir, 0)
	unlock, err := stopped.take(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := os.ReadFile(stopped.path)
	if err != nil {
		t.Fatal(err)
	}
	unlock() // the holder the patience ran out on ends
	n := testLock(dir, time.Second)
	n.busy = &lockBusy{since: time.Now().Add(-time.Minute), tenure: string(stale)}
	return openWait(t, n), dir
}
