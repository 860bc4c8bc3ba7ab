package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	n.busy.makeClaimFile(n.without)
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
// the turnstile it tries the lock directly too. With the lock held past
// the patience by the same holder it claims (claimWithout, which looks at
// the lock itself, turnstile or not).
func (w *lockWait) wait(ctx context.Context) error {
	passed := w.turn == nil
	for {
		if !passed {
			got, err := tryFlock(w.turn)
			passed = got || err != nil // a turnstile flock that refuses: do without it
		}
		now := time.Now()
		overdue := pastPatience(w.busy.heldSince(), now, w.patience)
		if passed || now.Sub(w.began) >= turnPatience {
			got, err := w.tryLock()
			if err != nil {
				return fmt.Errorf("%w (flock: %v)", errWithout, err)
			}
			if got {
				return nil
			}
			w.busy.held(time.Now(), readTenure(w.lock)) // dated after the try: the holder held it then
		}
		if overdue {
			if err := w.claimWithout(); !errors.Is(err, errNewHolder) {
				return err
			}
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
	return true, nil
}

// claimWithout is how a daemon past its patience goes without the lock.
// It takes its claim first (which every taker looks at once it holds the
// lock: tryLock), then looks at the lock once more: taken (nil), the
// claim let go; held by a holder not past the patience as its tenure,
// read after the claim, says (errNewHolder: one that took the lock since
// the last poll, or before the claim, so did not see it, whose wait
// begins anew), the claim let go; else errWithout, the claim kept
// (w.claim) until the apply without the lock ends. A claim file that
// cannot be opened for writing (a read-only spec dir, where no unit can
// be written either) is no reason to hold back the disable: errWithout
// without one. A claim another process holds (a second daemon) is waited
// out like a new holder.
func (w *lockWait) claimWithout() error {
	claiming()
	if claim, err := openLockFile(w.without); err == nil {
		switch err := setClaim(claim); {
		case err == nil:
			w.claim = claim
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
			claim.Close()
			return errNewHolder
		default: // opened read-only, or no OFD locks here: no claim
			w.log.Warn("the agent's claim on the node's unit lock not taken: going without it unclaimed", "path", w.without, "err", err)
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
		if !pastPatience(w.busy.held(now, readTenure(w.lock)), now, w.patience) {
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

// The claim is an open file description lock (F_OFD_SETLK) on the whole
// claim file, and a taker's look at it is F_OFD_GETLK, which takes
// nothing: no taker, stopped or killed while it looks, can keep the
// daemon from its claim (an flock taken shared to look, as before, could,
// and the daemon then went without unclaimed: the fourth review). The
// kernel drops the claim with the daemon's last descriptor, or its death.
func setClaim(f *os.File) error {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}

// claimed reports whether the daemon's claim at path is held: it applies
// without the lock. A claim file that does not exist was never made; one
// that cannot be opened for another reason (no descriptor left) counts
// as claimed: the taker lets the lock go and tries again.
func claimed(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		lookedAtClaim()
		return !errors.Is(err, os.ErrNotExist)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	err = unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk)
	lookedAtClaim() // the look's descriptor still open: a taker stopped here
	return err == nil && lk.Type != unix.F_UNLCK
}

// Test seams: lookedAtClaim runs right after a taker's look at the claim,
// claiming right before the daemon's claim (tests put the other side's
// step there, to pin the order of each side's two steps).
var (
	lookedAtClaim = func() {}
	claiming      = func() {}
)

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
