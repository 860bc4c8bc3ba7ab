package unitmgr

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// jobWatch tells StartUnits which of systemd's jobs have ended, from the
// JobRemoved signals systemd sends every client of its private socket,
// so that a wait for 10,000 start jobs does not ask PID 1 to list every
// queued job every few milliseconds. Polling ListJobs every 50 ms did:
// each reply serialises every queued job (10,000 at the start of a
// converge's starts, a couple of MB decoded in the agent), a few hundred
// times while PID 1 works through the jobs it is asked to list.
//
// The watch is shared by every connection the agent dials (a redial
// mid-wait lands on the same watch). Signals are delivered to it
// synchronously in godbus's reader goroutine, so it does little: a map
// lookup per waiter, most of the time none.
type jobWatch struct {
	mu      sync.Mutex
	waiters map[*jobWaiter]struct{}
}

// jobWaiter collects the ids of the ended jobs of some units, and counts
// down the jobs its wait is for.
type jobWaiter struct {
	units map[string]bool

	mu      sync.Mutex
	ended   map[uint32]bool // since the watch started
	pending map[uint32]bool // listed, not ended yet
	done    chan struct{}   // one token: pending became empty
}

// watch starts collecting the ended jobs of units; stop ends it.
func (w *jobWatch) watch(units []string) *jobWaiter {
	jw := &jobWaiter{units: make(map[string]bool, len(units)), ended: map[uint32]bool{}, done: make(chan struct{}, 1)}
	for _, u := range units {
		jw.units[u] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters == nil {
		w.waiters = map[*jobWaiter]struct{}{}
	}
	w.waiters[jw] = struct{}{}
	return jw
}

func (w *jobWatch) stop(jw *jobWaiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters, jw)
}

// removed records one JobRemoved signal (body: id, job path, unit,
// result). Any other signal is ignored (JobNew has the same body), and so
// is a body of another shape: the periodic listing still ends the wait.
func (w *jobWatch) removed(s *dbus.Signal) {
	if w == nil || s.Name != jobRemoved || len(s.Body) < 3 {
		return
	}
	id, ok1 := s.Body[0].(uint32)
	unit, ok2 := s.Body[2].(string)
	if !ok1 || !ok2 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for jw := range w.waiters {
		if jw.units[unit] {
			jw.end(id)
		}
	}
}

func (jw *jobWaiter) end(id uint32) {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	jw.ended[id] = true
	if jw.pending[id] {
		delete(jw.pending, id)
		if len(jw.pending) == 0 {
			jw.signalDone()
		}
	}
}

func (jw *jobWaiter) signalDone() {
	select {
	case jw.done <- struct{}{}:
	default:
	}
}

// listed sets what the wait is for from a listing of systemd's jobs.
func (jw *jobWaiter) listed(jobs []queuedJob) (left int) {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	jw.pending = pendingJobs(jobs, jw.units, jw.ended)
	return len(jw.pending)
}

// pendingJobs decides which of the listed jobs the wait is still for:
// the jobs of the waiter's units that have not ended since it started
// watching. Job ids are never reused by a running systemd, so a job that
// ended between the watch's start and the listing (its signal before or
// after the listing's reply) is not waited for, and a job listed is
// either still queued or its signal is on its way.
func pendingJobs(listed []queuedJob, units map[string]bool, ended map[uint32]bool) map[uint32]bool {
	pending := map[uint32]bool{}
	for _, j := range listed {
		if units[j.unit] && !ended[j.id] {
			pending[j.id] = true
		}
	}
	return pending
}

// queuedJob is one job of systemd's ListJobs.
type queuedJob struct {
	id   uint32
	unit string
}

// until waits until every listed job has ended, ctx ends, or recheck
// passes (then the caller lists the jobs again: a signal lost with a dead
// connection, or a systemd that sends none, cannot hold the wait longer
// than that). It reports whether all of them ended.
func (jw *jobWaiter) until(ctx context.Context, recheck time.Duration) (bool, error) {
	t := time.NewTimer(recheck)
	defer t.Stop()
	for {
		jw.mu.Lock()
		left := len(jw.pending)
		jw.mu.Unlock()
		if left == 0 {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
			return false, nil
		case <-jw.done:
		}
	}
}

// waitListed waits until none of the waiter's units has a job in list's
// listing: it lists once, counts the listed jobs' ends down, and lists
// again every recheck until they have all ended. The waiter must be
// watching before the first listing (see pendingJobs).
func (jw *jobWaiter) waitListed(ctx context.Context, list func(context.Context) ([]queuedJob, error), recheck time.Duration) error {
	for {
		jobs, err := list(ctx)
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		if jw.listed(jobs) == 0 {
			return nil
		}
		done, err := jw.until(ctx, recheck)
		if err != nil {
			return fmt.Errorf("wait for start jobs: %w", err)
		}
		if done {
			return nil
		}
	}
}
