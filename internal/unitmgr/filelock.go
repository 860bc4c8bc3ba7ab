package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
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
	path, turn string
	// patience bounds the wait (0: as long as the context allows): the
	// daemon's, so that a one-shot command stopped while it holds the
	// lock (Ctrl-Z, a debugger, a hung call) delays the core's changes by
	// that much once (gaveUp), not for good.
	patience time.Duration
	gaveUp   *gaveUp // nil: never gives up
	log      *slog.Logger
}

// gaveUp remembers that the daemon went on without the lock: until the
// lock is free again it only tries it, without waiting, so that every
// change behind a stopped command does not wait out the patience anew
// (the core's deadlines are shorter than a few of them). A watcher waits
// for the lock in the background and ends the give-up the moment the
// holder lets go, so that a later command, which holds the lock in the
// ordinary way, is waited for again.
type gaveUp struct {
	mu       sync.Mutex
	set      bool
	watching bool      // a watch goroutine waits for the lock
	last     time.Time // when it last logged going without
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
// read-only or full; a command not run as root) is no reason to hold back
// a disable: the caller goes on without it, and so does a daemon whose
// patience ran out (unlock is then a no-op); both are logged. The kernel
// drops the locks of a process that dies, so a crash never leaves them
// held.
func (n nodeLock) take(ctx context.Context) (unlock func(), err error) {
	return n.takeWithin(ctx, n.patience)
}

// takeWithin is take with the patience given (a daemon's, bounded by its
// callers' deadlines: patienceFor).
func (n nodeLock) takeWithin(ctx context.Context, patience time.Duration) (unlock func(), err error) {
	n.patience = patience
	lock, err := openLockFile(n.path)
	if err != nil {
		n.log.Warn("node's unit lock not opened: applying without it", "path", n.path, "err", err)
		return func() {}, nil
	}
	w := lockWait{nodeLock: n, began: time.Now(), lock: lock}
	if n.gaveUp.isSet() {
		return w.tryOnce()
	}
	if turn, err := openLockFile(n.turn); err == nil {
		defer turn.Close() // passes the turnstile on once the lock is ours
		w.turn = turn
	}
	switch err := w.wait(ctx); {
	case err == nil:
		n.gaveUp.clear()
		return func() { lock.Close() }, nil // closing the last descriptor releases the lock
	case errors.Is(err, errPatience):
		lock.Close()
		n.gaveUp.note(n.log, n.path, err)
		return func() {}, nil
	default:
		lock.Close()
		return nil, err
	}
}

var errPatience = errors.New("another hostcron command holds it")

// patienceFor bounds a daemon's patience (0: a manager that waits as long
// as it takes) by the deadlines of the callers waiting for the lock: half
// of what the nearest has left, so that its change still applies in time
// when the wait gives up, however long it waited before (behind another
// wait, an earlier batch, a node timeout shorter than the patience). At
// least one try. Pure.
func patienceFor(patience time.Duration, now time.Time, deadlines []time.Time) time.Duration {
	if patience <= 0 {
		return 0
	}
	for _, d := range deadlines {
		if left := d.Sub(now) / 2; left < patience {
			patience = left
		}
	}
	return max(patience, time.Nanosecond)
}

// lockWait is one wait for the node's unit lock.
type lockWait struct {
	nodeLock
	began      time.Time
	lock, turn *os.File // turn nil: no turnstile (not openable)
	logged     time.Duration
}

// wait takes the turnstile (if any), then the lock; past turnPatience on
// the turnstile it also tries the lock directly.
func (w *lockWait) wait(ctx context.Context) error {
	passed := w.turn == nil
	for {
		if !passed {
			got, err := tryFlock(w.turn)
			if err != nil {
				passed = true // a turnstile flock refuses: do without it
			} else if got {
				passed = true
			}
		}
		if passed || time.Since(w.began) >= turnPatience {
			got, err := tryFlock(w.lock)
			if err != nil {
				return fmt.Errorf("%w (flock: %v)", errPatience, err)
			}
			if got {
				return nil
			}
		}
		waited := time.Since(w.began)
		if w.patience > 0 && waited >= w.patience {
			return fmt.Errorf("%w: waited %s", errPatience, waited.Round(time.Second))
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

// tryOnce takes the lock if it is free, for a daemon that gave up on it
// before; else it goes on without it again.
func (w *lockWait) tryOnce() (func(), error) {
	if got, err := tryFlock(w.lock); err == nil && got {
		w.gaveUp.clear()
		w.log.Info("node's unit lock taken again", "path", w.path)
		return func() { w.lock.Close() }, nil
	}
	w.lock.Close()
	w.gaveUp.note(w.log, w.path, errPatience)
	return func() {}, nil
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

func (g *gaveUp) isSet() bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.set
}

func (g *gaveUp) clear() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.set = false
	g.mu.Unlock()
}

// note records a give-up, logs it (at most once a minute) and starts
// the watch for the lock's release.
func (g *gaveUp) note(log *slog.Logger, path string, err error) {
	if g == nil { // a manager without patience: only a flock that fails
		log.Warn("node's unit lock not taken: applying without it", "path", path, "err", err)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.set = true
	if !g.watching {
		g.watching = true
		go g.watch(log, path)
	}
	if time.Since(g.last) < time.Minute {
		return
	}
	g.last = time.Now()
	log.Error("node's unit lock not taken in the agent's patience (another hostcron command holds it, or flock fails): applying the core's changes without it until it is free",
		"path", path, "err", err)
}

// watch waits (blocking, on a descriptor of its own) until the lock is
// free, lets it go at once and ends the give-up. A lock that cannot be
// waited for (flock itself fails) keeps the give-up: every take still
// tries the lock first.
func (g *gaveUp) watch(log *slog.Logger, path string) {
	freed := waitFree(path)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watching = false
	if freed {
		g.set = false
		log.Info("node's unit lock free again: the agent waits for it again", "path", path)
	}
}

// waitFree blocks until the lock at path can be taken, takes it and lets
// it go; false if it cannot be waited for.
func waitFree(path string) bool {
	f, err := openLockFile(path)
	if err != nil {
		return false
	}
	defer f.Close() // lets the lock go
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err == nil {
			return true
		}
		if !errors.Is(err, unix.EINTR) {
			return false
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
