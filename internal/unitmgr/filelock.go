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

// lockFileName names the node's unit lock in the spec dir (root-only).
const lockFileName = ".unitmgr.lock"

// LockPath is the node's unit lock: every manager on the node, the
// daemon's and an operator's one-shot command's, holds it around its
// observe, plan and apply, so that neither writes a plan made from a
// state the other has changed since (an older version over a newer one,
// a tombstone file rewritten from a read before the other's tombstone).
func (l Layout) LockPath() string { return filepath.Join(l.Paths.SpecDir, lockFileName) }

// lockPoll is how often a waiter tries the lock again: flock(2) itself
// cannot give up when a context ends.
const lockPoll = 20 * time.Millisecond

// lockFile takes an exclusive flock on path, or gives up when ctx ends
// first. The kernel drops the lock when the process dies, so a crash
// never leaves it held. A lock file that cannot be opened or made (the
// spec dir's file system read-only or full) is no reason to stop a
// disable: the caller goes on without it (unlock is then a no-op) and
// only the in-process lock orders its apply, as before the node's lock.
func lockFile(ctx context.Context, path string, log *slog.Logger) (unlock func(), err error) {
	f, err := openLockFile(path)
	if err != nil {
		log.Warn("node's unit lock not taken: one-shot commands are not kept out of this apply", "path", path, "err", err)
		return func() {}, nil
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the last descriptor releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			log.Warn("node's unit lock not taken: one-shot commands are not kept out of this apply", "path", path, "err", err)
			return func() {}, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for the node's unit lock %s (another hostcron command holds it): %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

// openLockFile opens the lock file read-only (flock needs no more, and a
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
