package unitmgr

import (
	"log/slog"
	"sync"
	"time"
)

// lockBusy is the daemon's memory of the node's unit lock being held by
// another command: which holder (its tenure, writeTenure) and since when,
// across the waits of the changes behind it. A change's wait ends with
// its deadline (the core retries it), so the patience is the holder's,
// not one wait's: a change near its deadline never makes the daemon go
// without the lock beside an ordinary command, while the changes behind
// a command stopped with the lock held go through once that holder has
// held it for the patience, whatever their node timeout. A tenure other
// than the one first waited behind is a new holder, waited for anew: a
// later command, or the next batch of a command that took the lock again
// at once while the daemon was not waiting.
type lockBusy struct {
	mu        sync.Mutex
	since     time.Time // zero: not known to be held
	tenure    string    // the holder's tenure
	logged    time.Time // when going without was last logged
	claimMade bool      // the claim file exists (makeClaimFile)
}

// makeClaimFile makes the daemon's claim file at its first take, while
// the spec dir is healthy, so that a later full disk (no inode left) does
// not leave the daemon going without the lock unclaimed.
func (b *lockBusy) makeClaimFile(path string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.claimMade {
		return
	}
	if f, err := openLockFile(path); err == nil {
		f.Close()
		b.claimMade = true
	}
}

// pastPatience reports whether a lock held since since (zero: not known
// held) has been held for the patience (0: never) at now. Pure.
func pastPatience(since, now time.Time, patience time.Duration) bool {
	return patience > 0 && !since.IsZero() && now.Sub(since) >= patience
}

// heldSince is when the holder was first found holding the lock (zero:
// not known held).
func (b *lockBusy) heldSince() time.Time {
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.since
}

// held records a failed try at now behind the holder of tenure, and
// returns since when that holder holds the lock: a new holder since now.
func (b *lockBusy) held(now time.Time, tenure string) (since time.Time) {
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.since.IsZero() || tenure != b.tenure {
		b.since, b.tenure = now, tenure
	}
	return b.since
}

// free records that the daemon took the lock: nobody else holds it.
// again: it had gone without the lock before.
func (b *lockBusy) free() (again bool) {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	again = !b.logged.IsZero()
	b.since, b.tenure, b.logged = time.Time{}, "", time.Time{}
	return again
}

// wentWithout logs going without the lock: at most once a minute for a
// daemon, whose changes behind a stopped command all do.
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
	log.Error("node's unit lock held by the same command past the agent's patience (stopped?), or flock fails: applying the core's changes without it until it changes hands",
		"path", path, "err", err)
}
