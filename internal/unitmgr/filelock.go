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

// overdueRetry is how long a daemon whose wait is past its patience
// still tries the lock before it goes without: a failed try may have met
// the watcher's own hold (microseconds, the moment the holder let go),
// and the watcher forgets the holder well within it.
const overdueRetry = 100 * time.Millisecond

// nodeLock is how a manager takes the node's unit lock.
type nodeLock struct {
	path, turn string
	// patience is how long the lock may stay held by another command
	// before the daemon goes without it (0: never; an operator's command
	// waits as long as its context allows): a one-shot command stopped
	// while it holds the lock (Ctrl-Z, a debugger, a hung call) delays
	// the core's changes by the patience once, not for good.
	patience time.Duration
	busy     *lockBusy // nil: no patience
	log      *slog.Logger
}

// lockBusy is the daemon's memory of the lock being held by another
// command: since when (the first failed try after it was last seen
// free), across waits. A change's wait ends with its deadline (the core
// retries it), so the patience is the lock's, not one wait's: a change
// with little time left never makes the daemon go without the lock (found
// by review in the nineteenth session), while the changes behind a
// command stopped with the lock held go through once it has been held
// for the patience, whatever their node timeout. A watcher waits for the
// lock in the background and forgets the holder the moment it lets go,
// so that a later command, which holds the lock in the ordinary way, is
// waited for anew.
type lockBusy struct {
	mu       sync.Mutex
	since    time.Time // zero: not known to be held
	watching bool      // a watch goroutine waits for the lock
	logged   time.Time // when going without was last logged
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
// a disable: the caller goes on without it, and so does a daemon once the
// lock has been held past its patience (unlock is then a no-op); both are
// logged. The kernel drops the locks of a process that dies, so a crash
// never leaves them held.
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
		n.busy.free()
		return func() { lock.Close() }, nil // closing the last descriptor releases the lock
	case errors.Is(err, errWithout):
		lock.Close()
		n.busy.wentWithout(n.log, n.path, err)
		return func() {}, nil
	default:
		lock.Close()
		return nil, err
	}
}

var (
	errWithout   = errors.New("going without the node's unit lock")
	errNotWanted = errors.New("wait for the node's unit lock: nobody waits for it any more")
)

// pastPatience reports whether a lock held since since (zero: not known
// held) has been held for the patience (0: never) at now. Pure.
func pastPatience(since, now time.Time, patience time.Duration) bool {
	return patience > 0 && !since.IsZero() && now.Sub(since) >= patience
}

// lockWait is one wait for the node's unit lock.
type lockWait struct {
	nodeLock
	began      time.Time
	lock, turn *os.File // turn nil: no turnstile (not openable)
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
			got, err := tryFlock(w.lock)
			if err != nil {
				return fmt.Errorf("%w (flock: %v)", errWithout, err)
			}
			if got {
				return nil
			}
			w.busy.held(w.log, w.path, now)
		}
		switch {
		case !overdue:
			overdueAt = time.Time{}
		case overdueAt.IsZero():
			overdueAt = now
		case now.Sub(overdueAt) >= overdueRetry:
			return fmt.Errorf("%w: another hostcron command has held it for %s (the agent's patience is %s)",
				errWithout, now.Sub(w.busy.heldSince()).Round(time.Second), w.patience)
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

// heldSince is when the lock was first found held since it was last
// seen free (zero: not known held).
func (b *lockBusy) heldSince() time.Time {
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.since
}

// held records a failed try at now and starts the watch for the lock's
// release if none runs.
func (b *lockBusy) held(log *slog.Logger, path string, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since.IsZero() {
		b.since = now
	}
	if !b.watching {
		b.watching = true
		go b.watch(log, path)
	}
}

// free records that the lock was taken: nobody else holds it.
func (b *lockBusy) free() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.since = time.Time{}
	b.mu.Unlock()
}

// wentWithout logs going without the lock (at most once a minute for a
// daemon, whose changes behind a stopped command all do).
func (b *lockBusy) wentWithout(log *slog.Logger, path string, err error) {
	if b == nil { // a manager without patience: only a flock that fails
		log.Warn("node's unit lock not taken: applying without it", "path", path, "err", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.logged) < time.Minute {
		return
	}
	b.logged = time.Now()
	log.Error("node's unit lock not taken in the agent's patience (another hostcron command holds it, or flock fails): applying the core's changes without it until it is free",
		"path", path, "err", err)
}

// watch waits (blocking, on a descriptor of its own) until the lock is
// free, and forgets the holder while it still holds the lock itself (so
// no try that met its hold finds the old holder's time afterwards), then
// lets it go. A lock that cannot be waited for (flock itself fails) ends
// the watch; the next failed try starts another.
func (b *lockBusy) watch(log *slog.Logger, path string) {
	f, err := openLockFile(path)
	if err == nil {
		defer f.Close() // lets the lock go, after the holder is forgotten
	}
	freed := err == nil && waitFree(f)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watching = false
	if freed {
		if !b.since.IsZero() && !b.logged.IsZero() {
			log.Info("node's unit lock free again: the agent waits for it again", "path", path)
		}
		b.since, b.logged = time.Time{}, time.Time{}
	}
}

// waitFree blocks until f's lock can be taken and takes it; false if it
// cannot be waited for.
func waitFree(f *os.File) bool {
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
