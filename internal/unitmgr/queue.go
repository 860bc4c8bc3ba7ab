package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// applyQueue is the node's apply queue (issue 16): the core's job changes
// arrive as one activity call each, and a daemon-reload costs PID 1 time
// that grows with the node's unit count, so changes to different jobs
// that waited while an apply ran become one plan with one reload (group
// commit). A change that finds the node idle starts at once: there is no
// waiting window, so a lone change is as fast as without the queue.
type applyQueue struct {
	mu       sync.Mutex
	pending  []*queued
	draining bool // a drain goroutine runs; it stops when pending is empty
}

// queued is one caller's request waiting for its result.
type queued struct {
	ctx     context.Context
	req     Request
	answer  func(result) // called once, never blocks the drain
	unwatch func() bool  // stops the watch that removes it when ctx ends
}

type result struct {
	rep wire.NodeReport
	err error
}

// do queues req and waits for its part of the result. A caller whose
// context ends first leaves with the context's error: before its batch
// starts it is dropped from the queue (nothing is applied for it); after,
// the batch goes on for the others, and a retry of the change finds it
// applied (every operation is idempotent).
func (m *Manager) do(ctx context.Context, req Request) (wire.NodeReport, error) {
	done := make(chan result, 1) // buffered: the drain never waits for a caller that left
	if err := m.enqueue(ctx, req, func(r result) { done <- r }); err != nil {
		return wire.NodeReport{}, err
	}
	select {
	case r := <-done:
		return r.rep, r.err
	case <-ctx.Done():
		return wire.NodeReport{}, fmt.Errorf("wait for the node's apply queue: %w", ctx.Err())
	}
}

// doThen queues req and returns at once; then gets its part of the
// result, in a goroutine of its own, unless ctx ends before its batch
// starts (then nothing is applied for it and then is never called). An
// error returned (a request refused, a context already ended) is the
// request's only answer.
func (m *Manager) doThen(ctx context.Context, req Request, then func(wire.NodeReport, error)) error {
	return m.enqueue(ctx, req, func(r result) { go then(r.rep, r.err) })
}

// enqueue puts req in the queue with the function that answers it, and
// starts the drain if none runs.
func (m *Manager) enqueue(ctx context.Context, req Request, answer func(result)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("wait for the node's apply queue: %w", err)
	}
	if err := checkRequest(req); err != nil {
		return err // fails alone, before it can join anyone's batch
	}
	q := &queued{ctx: ctx, req: req, answer: answer}
	// A change whose context ends while it waits leaves the queue then,
	// not when the apply under way ends: at 10,000 timers one apply
	// outlasts a change's deadline, and Temporal's retries would pile up
	// beside the changes they replace. take stops the watch.
	m.q.mu.Lock()
	q.unwatch = context.AfterFunc(ctx, func() { m.leave(q) })
	m.q.pending = append(m.q.pending, q)
	start := !m.q.draining
	m.q.draining = true
	m.q.mu.Unlock()
	if start {
		go m.drain()
	}
	return nil
}

// leave removes q from the queue if it still waits there.
func (m *Manager) leave(q *queued) {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	if i := slices.Index(m.q.pending, q); i >= 0 {
		m.q.pending = slices.Delete(m.q.pending, i, i+1)
	}
}

// checkRequest refuses what the planner would refuse for the whole
// request, so that it never fails a batch it was merged into.
func checkRequest(req Request) error {
	switch req.Op {
	case OpApply, OpReconcile:
	case OpRemove:
		for _, n := range req.Names {
			if !validUnitName(n) {
				return fmt.Errorf("remove: %q is not a cron unit name", n)
			}
		}
	default:
		return fmt.Errorf("plan: unknown operation %q", req.Op)
	}
	return nil
}

// drain applies the queue batch by batch until it is empty. It takes the
// batch only once it holds the node's lock, so that everything that
// queued while the previous apply (or a Plan) held it joins. An empty
// queue ends it before it touches the node's lock file (the last caller
// may be gone, its spec dir with it: a test's temp dir).
func (m *Manager) drain() {
	for {
		m.lock <- struct{}{} // the manager's lock; waits as long as it takes
		if m.idle() {
			<-m.lock
			return
		}
		release, err := m.withNodeLock(context.Background(), m.anyWaiting)
		if err != nil { // every caller left while it waited (errNotWanted)
			continue // idle ends the drain, or the next caller's wait begins
		}
		batch := m.take()
		if len(batch) == 0 {
			release()
			return
		}
		m.runBatch(batch)
		release()
	}
}

// anyWaiting reports whether a caller still waits in the queue: the
// drain's wait for the node's lock ends when the last leaves (their
// deadlines passed; the core retries them).
func (m *Manager) anyWaiting() bool {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	return slices.ContainsFunc(m.q.pending, func(q *queued) bool { return q.ctx.Err() == nil })
}

// idle removes the callers that left and, if none is left, ends the
// drain (as take does).
func (m *Manager) idle() bool {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	return m.q.noneLeft()
}

// noneLeft removes the callers that left and, if none is left, ends the
// drain; the caller holds q.mu.
func (q *applyQueue) noneLeft() bool {
	q.pending = slices.DeleteFunc(q.pending, func(c *queued) bool { return c.ctx.Err() != nil })
	if len(q.pending) == 0 {
		q.draining = false
		return true
	}
	return false
}

// take removes the callers that left and the next batch (batchLen) from
// the queue; none left ends the drain.
func (m *Manager) take() []*queued {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	if m.q.noneLeft() {
		return nil
	}
	reqs := make([]Request, len(m.q.pending))
	for i, q := range m.q.pending {
		reqs[i] = q.req
	}
	n := batchLen(reqs)
	batch := slices.Clone(m.q.pending[:n])
	for _, q := range batch {
		q.unwatch()
	}
	m.q.pending = slices.Delete(m.q.pending, 0, n)
	return batch
}

// runBatch applies a batch (applyBatch), handing each caller its part as
// soon as it is known.
func (m *Manager) runBatch(batch []*queued) {
	delivered := make(map[*queued]bool, len(batch))
	deliver := func(q *queued, r result) {
		delivered[q] = true
		q.answer(r)
	}
	defer func() {
		// A panic here would end the agent, not one activity as it did
		// when each ran its own apply (the worker recovers those): each
		// caller not yet answered gets it as an error, Temporal retries,
		// and the dirty marker makes the retry reload whatever the batch
		// had written.
		if r := recover(); r != nil {
			m.log.Error("apply queue: a batch panicked", "panic", r, "stack", string(debug.Stack()))
			for _, q := range batch {
				if !delivered[q] {
					q.answer(result{err: fmt.Errorf("apply of %d queued changes panicked: %v", len(batch), r)})
				}
			}
		}
	}()
	m.applyBatch(batch, deliver)
}

// applyBatch plans and applies a batch as one request and delivers each
// caller's part. The batch's context ends only when every caller's has:
// one caller giving up does not stop the others' changes. A batch that
// failed as a whole for a reason that may be one change's doing
// (retryAlone) is applied again in halves, each half one plan, and a half
// that fails so is halved again down to the change alone: one bad change
// among n costs about 2·log2(n) plans and reloads only for the halves
// without it, not the n plans and reloads of applying each change alone
// (issue 16: a batch holds whatever arrived during the apply before it,
// a whole burst of hundreds, and each plan that writes a unit file
// reloads). A half's callers are answered when it ends, not when the
// last half does, so they do not run out their deadlines (or hold their
// activity slots) through the other halves' reloads. The first half is
// applied before the second, so queue order is kept (within a batch
// different jobs' changes commute anyway: batchLen). A node-wide fault
// that fails every plan before it writes (systemd gone) costs 2n-1
// failed plans instead of n, none of them reloading.
func (m *Manager) applyBatch(batch []*queued, deliver func(*queued, result)) {
	reqs := make([]Request, len(batch))
	ctxs := make([]context.Context, len(batch))
	for i, q := range batch {
		reqs[i], ctxs[i] = q.req, q.ctx
	}
	ctx, stop := untilAllDone(ctxs)
	defer stop()
	req := mergeBatch(reqs)
	if len(batch) > 1 {
		m.log.Debug("apply queue: one plan for several changes", "changes", len(batch), "jobs", len(req.Jobs), "removals", len(req.Names))
	}
	rep, err := m.planAndObserve(ctx, req)
	switch {
	case len(batch) == 1:
		deliver(batch[0], result{rep, err})
	case retryAlone(err):
		half := len(batch) / 2
		m.applyWaiting(batch[:half], deliver)
		m.applyWaiting(batch[half:], deliver)
	default:
		for i, r := range splitResult(reqs, req, rep, err) {
			deliver(batch[i], r)
		}
	}
}

// applyWaiting applies as one batch (applyBatch) the callers of part that
// still wait; one that left gets its context's error, and nothing is
// applied for it.
func (m *Manager) applyWaiting(part []*queued, deliver func(*queued, result)) {
	var waiting []*queued
	for _, q := range part {
		if err := q.ctx.Err(); err != nil {
			deliver(q, result{err: fmt.Errorf("wait for the node's apply queue: %w", err)})
			continue
		}
		waiting = append(waiting, q)
	}
	if len(waiting) > 0 {
		m.applyBatch(waiting, deliver)
	}
}

// planAndObserve plans and applies req with a fresh executor and tells
// the observer.
func (m *Manager) planAndObserve(ctx context.Context, req Request) (wire.NodeReport, error) {
	e := executor{sys: m.sys, layout: m.layout, log: m.log, lockDir: m.lockDir, obs: m.obs, steps: map[string]int{},
		endCatchUp: m.endCatchUp}
	start := time.Now()
	rep, err := m.planAndRun(ctx, req, &e)
	if m.obs != nil {
		m.obs.Applied(string(req.Op), req.Operator, time.Since(start), e.steps, err, m.now())
	}
	return rep, err
}

// retryAlone tells whether a batch's error may be one change's doing that
// failed the whole plan: a failed read of one unit's files, a failed
// removal, an enable or disable that systemd refused for one bad file.
// Then the batch is applied again in parts (applyBatch), so one job's
// fault is its own caller's error, not that of every unrelated change
// that queued with it (the review found one such job failing every
// change of its node while Temporal retried it). A failed daemon-reload
// is the node's: its callers all fail and are retried, once each; so is
// a closed systemd connection (the agent is stopping).
func retryAlone(err error) bool {
	_, whole := splitErrors(err)
	return len(whole) > 0 && !errors.Is(err, errReload) && !errors.Is(err, errClosed)
}

// untilAllDone returns a context that ends when every one of ctxs has
// ended (or stop is called).
func untilAllDone(ctxs []context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(ctxs)))
	stops := make([]func() bool, len(ctxs))
	for i, c := range ctxs {
		stops[i] = context.AfterFunc(c, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// mergeable: the core's applies and deletes merge; a reconcile (a whole
// set, with its own orphan rules) and an operator's command run alone.
func mergeable(r Request) bool {
	return !r.Operator && (r.Op == OpApply || r.Op == OpRemove)
}

// batchLen is how many requests from the front of the queue form one
// batch: the longest run of mergeable requests in which no job is both
// applied and deleted, nor applied at two different versions. A later
// request that changes a job the other way, or to another version, waits
// for the next batch, so an apply and a delete of one job keep their
// order, and a version that fails to render or write never hides the one
// queued before it (the review: a disable followed by a broken version
// was reported applied while the timer kept running); repeats of one
// version (a Temporal retry) and two deletes of one job merge
// (mergeBatch). Different jobs' changes commute.
func batchLen(reqs []Request) int {
	if len(reqs) == 0 {
		return 0
	}
	if !mergeable(reqs[0]) {
		return 1
	}
	applied, deleted := map[string]int64{}, map[string]bool{}
	for i, r := range reqs {
		if !mergeable(r) {
			return i
		}
		for _, j := range r.Jobs {
			if v, ok := applied[j.UnitName()]; deleted[j.UnitName()] || (ok && v != j.Version) {
				return i
			}
		}
		for _, n := range r.Names {
			if _, ok := applied[n]; ok {
				return i
			}
		}
		for _, j := range r.Jobs {
			applied[j.UnitName()] = j.Version
		}
		for _, n := range r.Names {
			deleted[n] = true
		}
	}
	return len(reqs)
}

// mergeBatch makes one request of a batch (batchLen). One request is
// itself. Several applies of one job resolve to the highest version (the
// later one of equal versions): applied in sequence, a lower version
// after a higher one is kept out by the installed spec anyway, and a
// tombstone that refuses the higher refuses the lower. Several deletes of
// one job resolve to the highest version, 0 (not said: refuse every
// version) above all. Applies only stay an OpApply; any delete makes an
// OpBatch.
func mergeBatch(reqs []Request) Request {
	if len(reqs) == 1 {
		return reqs[0]
	}
	out := Request{Op: OpApply}
	at := map[string]int{} // unit name → index in out.Jobs
	versions := map[string]int64{}
	for _, r := range reqs {
		for _, j := range r.Jobs {
			i, seen := at[j.UnitName()]
			switch {
			case !seen:
				at[j.UnitName()] = len(out.Jobs)
				out.Jobs = append(out.Jobs, j)
			case j.Version >= out.Jobs[i].Version:
				out.Jobs[i] = j
			}
		}
		if r.Op != OpRemove {
			continue
		}
		for _, n := range r.Names {
			v, seen := versions[n]
			switch {
			case !seen:
				out.Names = append(out.Names, n)
				versions[n] = r.Version
			case v != 0 && (r.Version == 0 || r.Version > v):
				versions[n] = r.Version
			}
		}
	}
	if len(out.Names) > 0 {
		out.Op, out.Versions = OpBatch, versions
	}
	return out
}

// splitResult gives each request of a batch its part of what the merged
// request did: the report entries of its own units, and the errors that
// concern it. An error of another job's step (a unitError) is not its
// error; a failure of the node-wide steps (enable, disable, a removal,
// daemon-reload) is every caller's, since what followed it did not run
// and each caller must be retried. An apply whose job the batch
// resolved to another (higher) version is reported kept (or stale, if
// the version that won was refused by a tombstone), as when that version
// was already installed; the Reloads of the batch is everyone's.
func splitResult(reqs []Request, merged Request, rep wire.NodeReport, err error) []result {
	won := map[string]int64{}
	for _, j := range merged.Jobs {
		won[j.UnitName()] = j.Version
	}
	stale := map[string]bool{}
	for _, n := range rep.Stale {
		stale[n] = true
	}
	own, whole := splitErrors(err)
	out := make([]result, len(reqs))
	for i, r := range reqs {
		mine := map[string]bool{}
		var part wire.NodeReport
		for _, j := range r.Jobs {
			n := j.UnitName()
			if v, ok := won[n]; ok && v != j.Version {
				if stale[n] {
					part.Stale = append(part.Stale, n)
				} else {
					part.Kept = append(part.Kept, n)
				}
				continue
			}
			mine[n] = true
		}
		for _, n := range r.Names {
			mine[n] = true
		}
		part = mergeReports(part, reportFor(rep, mine))
		part.Reloads = rep.Reloads
		var errs []error
		for _, e := range whole {
			errs = append(errs, fmt.Errorf("the node's apply of %d queued changes stopped: %w", len(reqs), e))
		}
		for _, e := range own {
			if mine[e.unit] {
				errs = append(errs, e)
			}
		}
		out[i] = result{part, errors.Join(errs...)}
	}
	return out
}

// splitErrors separates the unit errors of a run's error from the rest.
func splitErrors(err error) (own []*unitError, whole []error) {
	if err == nil {
		return nil, nil
	}
	var members []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		members = j.Unwrap()
	} else {
		members = []error{err}
	}
	for _, e := range members {
		var ue *unitError
		if errors.As(e, &ue) {
			own = append(own, ue)
		} else {
			whole = append(whole, e)
		}
	}
	return own, whole
}

// reportFor keeps the entries of rep that concern the units in mine.
func reportFor(rep wire.NodeReport, mine map[string]bool) wire.NodeReport {
	keep := func(entries []string, unit func(string) string) []string {
		var out []string
		for _, e := range entries {
			if mine[unit(e)] {
				out = append(out, e)
			}
		}
		return out
	}
	return wire.NodeReport{
		Written: keep(rep.Written, unitOfFile), Specs: keep(rep.Specs, sameName), Removed: keep(rep.Removed, sameName),
		Enabled: keep(rep.Enabled, unitOfFile), Disabled: keep(rep.Disabled, unitOfFile),
		Failed: keep(rep.Failed, unitOfFailure), Kept: keep(rep.Kept, sameName), Stale: keep(rep.Stale, sameName),
	}
}

func mergeReports(a, b wire.NodeReport) wire.NodeReport {
	a.Written = append(a.Written, b.Written...)
	a.Specs = append(a.Specs, b.Specs...)
	a.Removed = append(a.Removed, b.Removed...)
	a.Enabled = append(a.Enabled, b.Enabled...)
	a.Disabled = append(a.Disabled, b.Disabled...)
	a.Failed = append(a.Failed, b.Failed...)
	a.Kept = append(a.Kept, b.Kept...)
	a.Stale = append(a.Stale, b.Stale...)
	return a
}

func sameName(n string) string { return n }

// unitOfFile: cron-t-id.timer → cron-t-id.
func unitOfFile(f string) string {
	return strings.TrimSuffix(strings.TrimSuffix(f, extTimer), extService)
}

// unitOfFailure: "cron-t-id: reason" → cron-t-id.
func unitOfFailure(f string) string {
	n, _, _ := strings.Cut(f, ": ")
	return n
}
