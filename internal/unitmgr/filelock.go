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
	lockFileName = ".unitmgr.lock"
	turnFileName = ".unitmgr.turn"
)

// LockPath is the node's unit lock: every manager on the node, the
// daemon's and an operator's one-shot command's, holds it around its
// observe, plan and apply, so that neither writes a plan made from a
// state the other has changed since (an older version over a newer one,
// a tombstone file rewritten from a read before the other's tombstone).
func (l Layout) LockPath() string { return filepath.Join(l.Paths.SpecDir, lockFileName) }

func (l Layout) turnPath() string { return filepath.Join(l.Paths.SpecDir, turnFileName) }

// Timing of the wait for the node's unit lock: flock(2) cannot give up
// when a context ends, so a waiter tries again every lockPoll, and says
// every lockWaitLog that it still waits.
const (
	lockPoll    = 20 * time.Millisecond
	lockWaitLog = 30 * time.Second
)

// nodeLock is how a manager takes the node's unit lock.
type nodeLock struct {
	path, turn string
	// patience bounds the wait (0: as long as the context allows): the
	// daemon's, so that a one-shot command stopped while it holds the
	// lock (Ctrl-Z, a debugger, a hung call) delays the core's changes,
	// disables among them, by that much and no more.
	patience time.Duration
	log      *slog.Logger
}

// take takes the node's unit lock, or gives up when ctx ends first.
//
// The turnstile makes the wait fair: a waiter holds it while it waits
// for the lock, and every taker passes through it first, so a manager
// that releases the lock and at once wants it again (a burst, a backlog
// after a Temporal outage) queues behind the waiter instead of taking the
// lock again in the microseconds a poller cannot hit.
//
// A lock that cannot be opened or made (the spec dir's file system
// read-only or full) is no reason to hold back a disable: the caller goes
// on without it, and so does a daemon whose patience ran out (unlock is
// then a no-op); both are logged. The kernel drops the locks of a process
// that dies, so a crash never leaves them held.
func (n nodeLock) take(ctx context.Context) (unlock func(), err error) {
	lock, err := openLockFile(n.path)
	if err != nil {
		return n.without("not opened", err), nil
	}
	turn, err := openLockFile(n.turn)
	if err != nil {
		lock.Close()
		return n.without("turnstile not opened", err), nil
	}
	defer turn.Close() // passes the turnstile on once the lock is ours
	w := lockWait{began: time.Now(), nodeLock: n}
	for _, f := range []*os.File{turn, lock} {
		if err := w.flock(ctx, f); err != nil {
			lock.Close()
			switch {
			case errors.Is(err, errPatience):
				return n.without("waited for too long (another hostcron command holds it)", err), nil
			case errors.Is(err, errNoFlock):
				return n.without("not taken", err), nil
			}
			return nil, err
		}
	}
	return func() { lock.Close() }, nil // closing the last descriptor releases the lock
}

// without logs why the caller goes on without the node's lock, and is
// the no-op unlock.
func (n nodeLock) without(why string, err error) func() {
	n.log.Error("node's unit lock "+why+": applying without it, one-shot commands are not kept out of this apply",
		"path", n.path, "err", err)
	return func() {}
}

// errPatience: the daemon's wait outlasted its patience; errNoFlock:
// flock itself failed (not a wait).
var (
	errPatience = errors.New("patience ran out")
	errNoFlock  = errors.New("flock failed")
)

// lockWait is one wait for the node's unit lock.
type lockWait struct {
	nodeLock
	began  time.Time
	logged time.Duration // how long the wait was when last logged
}

// flock takes an exclusive flock on f, polling.
func (w *lockWait) flock(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("%w: %s: %v", errNoFlock, f.Name(), err)
		}
		waited := time.Since(w.began)
		if w.patience > 0 && waited >= w.patience {
			return fmt.Errorf("%w after %s", errPatience, waited.Round(time.Second))
		}
		if waited-w.logged >= lockWaitLog {
			w.logged = waited
			w.log.Warn("waiting for the node's unit lock: another hostcron command (node-agent apply, reconcile, remove or burst) holds it",
				"path", w.path, "waited", waited.Round(time.Second), "patience", w.patience)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the node's unit lock %s (another hostcron command holds it): %w", w.path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// openLockFile opens a lock file read-only (flock needs no more, and a
// read-only file system still opens it), making it (0600, in a 0700
// directory) only when it is missing.
func openLockFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if !errors.Is(err, os.ErrNotExist) {
		return f, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600)
}
