package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockFileName names the node's unit lock in the spec dir (root-only);
// turnFileName its turnstile beside it.
const (
	lockFileName    = ".unitmgr.lock"
	turnFileName    = ".unitmgr.turn"
	withoutFileName = ".unitmgr.without"
)

// LockPath is the node's unit lock: every manager on the node, the
// daemon's and an operator's one-shot command's, holds it around its
// observe, plan and apply, so that neither writes a plan made from a
// state the other has changed since (an older version over a newer one,
// a tombstone file rewritten from a read before the other's tombstone).
func (l Layout) LockPath() string { return filepath.Join(l.Paths.SpecDir, lockFileName) }

func (l Layout) turnPath() string { return filepath.Join(l.Paths.SpecDir, turnFileName) }

// withoutPath is the daemon's claim while it applies without the lock
// (lockWait.claimWithout).
func (l Layout) withoutPath() string { return filepath.Join(l.Paths.SpecDir, withoutFileName) }

// Timing of the wait for the node's unit lock. flock(2) cannot give up
// when a context ends, so a waiter tries again every lockPoll, and says
// every lockWaitLog that it still waits. A waiter that has not passed the
// turnstile in turnPatience tries the lock itself as well: the turnstile's
// holder may be a waiter stopped while it waited (Ctrl-Z), with the lock
// free.
const (
	lockPoll    = 20 * time.Millisecond
	lockWaitLog = 30 * time.Second
)

var turnPatience = 5 * time.Second // a variable for tests

// overdueRetry is how long a daemon whose wait is past its patience
// still tries the lock before it goes without: a failed try may have met
// a new holder that has not written its tenure yet, which it does well
// within it.
const overdueRetry = 100 * time.Millisecond

// nodeLock is how a manager takes the node's unit lock.
type nodeLock struct {
	path, turn, without string
	// patience is how long the lock may stay held by another command
	// before the daemon goes without it (0: never; an operator's command
	// waits as long as its context allows): a one-shot command stopped
	// while it holds the lock (Ctrl-Z, a debugger, a hung call) delays
	// the core's changes by the patience once, not for good.
	patience time.Duration
	busy     *lockBusy // nil: no patience
	log      *slog.Logger
}

// take takes the node's unit lock, or gives up when ctx ends first or
// wanted (nil: always) says nobody waits for it any more.
//
// The turnstile makes the wait fair: a waiter holds it while it waits
// for the lock, and every taker passes through it first, so a manager
// that releases the lock and at once wants it again (a burst, a backlog
// after a Temporal outage) queues behind the waiter instead of taking the
// lock again in the microseconds a poller cannot hit.
//
// A lock that cannot be opened or made (the spec dir's file system
// read-only or full; a command not run as root) is no reason to hold back
// a disable: the caller goes on without it (unlock is then a no-op), and
// so does a daemon once the same holder has held the lock past its
// patience (claimWithout); both are logged. The kernel drops the locks of
// a process that dies, so a crash never leaves them held.
func (n nodeLock) take(ctx context.Context, wanted func() bool) (unlock func(), err error) {
	lock, err := openLockFile(n.path)
	if err != nil {
		n.log.Warn("node's unit lock not opened: applying without it", "path", n.path, "err", err)
		return func() {}, nil
	}
	w := lockWait{nodeLock: n, began: time.Now(), lock: lock, wanted: wanted}
	if turn, err := openLockFile(n.turn); err == nil {
		defer turn.Close() // passes the turnstile on once the lock is ours
		w.turn = turn
	}
	switch err := w.wait(ctx); {
	case err == nil:
		if n.busy.free() {
			n.log.Info("node's unit lock taken again: the agent waits for it again", "path", n.path)
		}
		return func() { lock.Close() }, nil // closing the last descriptor releases the lock
	case errors.Is(err, errWithout):
		lock.Close()
		n.busy.wentWithout(n.log, n.path, err)
		return w.dropClaim, nil // the apply without the lock ends: the claim goes
	default:
		lock.Close()
		return nil, err
	}
}

var (
	errWithout   = errors.New("going without the node's unit lock")
	errNotWanted = errors.New("wait for the node's unit lock: nobody waits for it any more")
	errNewHolder = errors.New("the node's unit lock changed hands")
)

// lockWait is one wait for the node's unit lock.
type lockWait struct {
	nodeLock
	began      time.Time
	lock, turn *os.File // turn nil: no turnstile (not openable)
	claim      *os.File // going without: the daemon's claim (claimWithout)
	wanted     func() bool
	logged     time.Duration
}

// wait takes the turnstile (if any), then the lock; past turnPatience on
// the turnstile, or with the lock held past the patience, it tries the
// lock directly too.
func (w *lockWait) wait(ctx context.Context) error {
	passed := w.turn == nil
	var overdueAt time.Time // when this wait first found the lock held past the patience
	for {
		if !passed {
			got, err := tryFlock(w.turn)
			passed = got || err != nil // a turnstile flock that refuses: do without it
		}
		now := time.Now()
		overdue := pastPatience(w.busy.heldSince(), now, w.patience)
		if passed || overdue || now.Sub(w.began) >= turnPatience {
			got, err := w.tryLock()
			if err != nil {
				return fmt.Errorf("%w (flock: %v)", errWithout, err)
			}
			if got {
				return nil
			}
			w.busy.held(time.Now(), readTenure(w.lock)) // dated after the try: the holder held it then
		}
		switch {
		case !overdue:
			overdueAt = time.Time{}
		case overdueAt.IsZero():
			overdueAt = now
		case now.Sub(overdueAt) >= overdueRetry:
			if err := w.claimWithout(); !errors.Is(err, errNewHolder) {
				return err
			}
			overdueAt = time.Time{}
		}
		if waited := now.Sub(w.began); waited-w.logged >= lockWaitLog {
			w.logged = waited
			w.log.Warn("waiting for the node's unit lock: another hostcron command (node-agent apply, reconcile, remove or burst) holds it",
				"path", w.path, "waited", waited.Round(time.Second), "patience", w.patience)
		}
		if w.wanted != nil && !w.wanted() {
			return errNotWanted
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the node's unit lock %s (another hostcron command holds it): %w", w.path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// tryLock takes the lock if it is free and writes this holder's tenure;
// while the daemon applies without the lock (its claim is held) it lets
// the lock go again: the daemon took the holder it gave up on for this
// one, and its apply is under way.
func (w *lockWait) tryLock() (bool, error) {
	got, err := tryFlock(w.lock)
	if err != nil || !got {
		return got, err
	}
	writeTenure(w.lock) // before the look at the claim: claimWithout reads it after taking the claim
	if claimed(w.without) {
		_ = unix.Flock(int(w.lock.Fd()), unix.LOCK_UN)
		return false, nil
	}
	lookedAtClaim()
	return true, nil
}

// lookedAtClaim runs once a taker has found no claim (tests put the
// daemon's claim there).
var lookedAtClaim = func() {}

// claimWithout is how a daemon past its patience goes without the lock.
// It takes its claim first (which every taker looks at once it holds the
// lock: tryLock), then looks at the lock once more: taken (nil), the
// claim let go; held under a tenure other than the one past the patience
// (errNewHolder: a holder that took it since the last poll, or before
// the claim, so did not see it, whose wait begins anew), the claim let
// go; else errWithout, the claim kept (w.claim) until the apply without
// the lock ends. A claim that cannot be made is no reason to hold back
// the disable: errWithout without one.
func (w *lockWait) claimWithout() error {
	if claim, err := openLockFile(w.without); err == nil {
		if flockWithin(claim, overdueRetry) {
			w.claim = claim
		} else {
			claim.Close()
		}
	}
	got, err := tryFlock(w.lock)
	if err == nil && got {
		writeTenure(w.lock)
		w.dropClaim()
		return nil
	}
	if err == nil {
		// The holder now, read after the claim: one that took the lock
		// since the last poll (its tenure is new) is not past the patience.
		now := time.Now()
		w.busy.held(now, readTenure(w.lock))
		if !pastPatience(w.busy.heldSince(), now, w.patience) {
			w.dropClaim()
			return errNewHolder
		}
	}
	return fmt.Errorf("%w: another hostcron command has held it for %s (the agent's patience is %s)",
		errWithout, time.Since(w.busy.heldSince()).Round(time.Second), w.patience)
}

func (w *lockWait) dropClaim() {
	if w.claim != nil {
		w.claim.Close()
		w.claim = nil
	}
}

// flockWithin takes an exclusive flock on f, trying for up to patience:
// a taker looks at the claim for microseconds (claimed), but one stopped
// right there (Ctrl-Z) must not stop the daemon for good. That taker
// holds the lock too, so it is the holder the patience ran out on.
func flockWithin(f *os.File, patience time.Duration) bool {
	for deadline := time.Now().Add(patience); ; time.Sleep(lockPoll / 4) {
		if got, err := tryFlock(f); got || err != nil || time.Now().After(deadline) {
			return got
		}
	}
}

// claimed reports whether the daemon's claim at path is held: it applies
// without the lock. A claim file that cannot be opened was never made.
func claimed(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// tryFlock takes an exclusive flock on f if it is free.
func tryFlock(f *os.File) (bool, error) {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		return false, nil
	}
	return false, err
}

// openLockFile opens a lock file for reading and writing (its tenure),
// or read-only where it cannot be written (flock needs no more, and a
// read-only file system still opens it), making it (0600, in a 0700
// directory) only when it is missing.
func openLockFile(path string) (*os.File, error) {
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
		return f, nil
	}
	f, err := os.Open(path)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// tenureLen is the size of a tenure: "pid nanoseconds\n", fixed width.
const tenureLen = 31

// writeTenure says in the lock file who took the lock and when (the
// holder's process and its clock): a waiter that reads a tenure other
// than the one it first waited behind knows the lock changed hands
// (lockBusy.held), and an operator reading the file sees who holds it. A
// file that cannot be written (read-only) keeps the last tenure.
func writeTenure(lock *os.File) {
	_, _ = lock.WriteAt(fmt.Appendf(nil, "%010d %019d\n", os.Getpid(), time.Now().UnixNano()), 0)
}

// readTenure is the lock file's tenure ("" if none was ever written).
func readTenure(lock *os.File) string {
	b := make([]byte, tenureLen)
	n, _ := lock.ReadAt(b, 0)
	return string(b[:n])
}
