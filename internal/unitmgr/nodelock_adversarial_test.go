package unitmgr

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Adversarial review of df7e09e: patienceFor lets a caller with little
// deadline left collapse the daemon's 30 s patience to almost nothing,
// so the daemon gives up on an ordinary, running command (not a stopped
// one) and applies its change while the command holds the lock and its
// plan: the command's older copy is then written over the daemon's newer
// disable.
func TestReviewNearDeadlineRacesARunningCommand(t *testing.T) {
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
	obs, err := daemon.observe(ctx, Request{Op: OpApply, Jobs: []wire.Job{job(idA)}})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	on := f.active[job(idA).UnitName()+".timer"]
	f.mu.Unlock()
	if v := obs.Disk[job(idA).UnitName()].Installed.Version; v != 2 || on {
		t.Errorf("after the core's disable (version 2): installed version %d, timer active %v", v, on)
	}
}

// Adversarial review of df7e09e: "At least one try" (patienceFor) does
// not hold when another waiter holds the turnstile: with a patience under
// turnPatience the daemon never tries the lock, though it is free, and
// applies without it; the waiter on the turnstile takes the free lock at
// its next poll and applies concurrently.
func TestReviewShortPatienceNeverTriesAFreeLock(t *testing.T) {
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
		t.Logf("not applied (safe, retried): %v", err)
		return
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

// Adversarial review of df7e09e: one change with little deadline left
// (it may even leave before its batch) bounds the patience to half of it,
// and its give-up then holds for every later change until the lock is
// free: a fresh change with its whole deadline applies at once beside an
// ordinary command that holds the lock for a few seconds (a reconcile of
// many units), which the 30 s patience was meant to wait for.
func TestReviewOneShortDeadlineUnlocksEveryLaterChange(t *testing.T) {
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
