// Package dispatch hands the core's outbox of job changes to Temporal: each
// change becomes a signal-with-start of the job's workflow, which applies
// changes to one job in order. A change is marked dispatched only after
// Temporal accepted it, so none is lost while Temporal is down; a crash in
// between sends it again, which the workflow ignores (it remembers the
// highest task id it handled).
//
// Several core-api replicas may run a dispatcher each: a dispatcher leases
// the rows it sends (store.ClaimTasks), only a job's oldest pending row is
// eligible (per-job order), and a row whose send fails backs off on its
// own, so one stuck job does not stall the others. Queuing a task notifies
// every dispatcher (store.OutboxChannel); each sends different jobs'
// tasks in parallel.
package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/workflows"
)

// Signaler is the part of the Temporal client the dispatcher uses.
type Signaler interface {
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
}

// Dispatcher sends the outbox to Temporal. It wakes when a task is queued
// (LISTEN/NOTIFY on a session of its own), polls as a fallback, and sends
// up to Parallel tasks at once, each of a different job.
type Dispatcher struct {
	Store    *store.Store
	Temporal Signaler
	Log      *slog.Logger
	// Poll is the fallback pass while the listener works (default 5s):
	// it finds what no notification announces, a dead replica's lease
	// running out (30s) and tasks queued by a replica from before the
	// notification. A retry this dispatcher scheduled wakes it on time
	// without it.
	Poll time.Duration
	// DeafPoll is the pass interval while the listener is down (default
	// 200ms, the interval dispatch had before it listened): a queued task
	// waits no longer then than it did before.
	DeafPoll time.Duration
	// ListenCheck is how long the listener waits quietly before it pings
	// its session (default 30s), so a session whose network vanished is
	// noticed and replaced.
	ListenCheck time.Duration
	// Parallel bounds the sends in flight, and so the tasks claimed at
	// once (default 8); each is a different job's, as only a job's oldest
	// pending task is ever claimed.
	Parallel    int
	NodeTimeout time.Duration // passed to job workflows
	// Lease is how long a claim keeps other dispatchers off a row
	// (default 30s); a dispatcher that dies mid-send frees it then.
	Lease time.Duration
	// SendTimeout bounds one signal (default 10s; at most half the Lease:
	// a send starts only while the lease outlasts it).
	SendTimeout time.Duration
	// Hooks are fault points for tests; nil in production.
	Hooks *TestHooks
	// Metrics observe each row's dispatch lag; nil: not observed.
	Metrics *metrics.Core
}

// TestHooks are fault points a test sets (through core.Config's
// DispatchTestHooks) to stop a replica at the worst moments; production
// never sets them.
type TestHooks struct {
	// AfterSignal runs after Temporal accepted a task's signal and before
	// the task is marked dispatched, with the dispatcher's context, which
	// ends when the replica stops. If it returns an error the task is not
	// marked, as if the replica had died right there: a test "kills" a
	// replica at that point by blocking until ctx ends and then stopping
	// the replica. The lease then runs out and another dispatcher sends
	// the task again.
	AfterSignal func(ctx context.Context, task store.Task) error
	// BeforeClaim runs before every claim. If it returns an error nothing
	// is claimed or sent (as during an outage); a test holds the outbox
	// back by blocking in it (tests/faults/control fills a shard through a
	// converge first).
	BeforeClaim func(ctx context.Context) error
}

func (d *Dispatcher) defaults() {
	if d.Poll <= 0 {
		d.Poll = 5 * time.Second
	}
	if d.DeafPoll <= 0 {
		d.DeafPoll = 200 * time.Millisecond
	}
	if d.ListenCheck <= 0 {
		d.ListenCheck = 30 * time.Second
	}
	if d.Parallel <= 0 {
		d.Parallel = 8
	}
	if d.Lease <= 0 {
		d.Lease = 30 * time.Second
	}
	if d.SendTimeout <= 0 || d.SendTimeout > d.Lease/2 {
		d.SendTimeout = min(10*time.Second, d.Lease/3)
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
}

// sent is what became of one claimed task.
type sent struct {
	ok      bool          // Temporal accepted it
	outage  error         // Temporal unreachable (not the task's fault)
	retryIn time.Duration // given back, due again after this; 0: not given back
}

// Run dispatches until ctx ends, then waits for its sends and its
// listener to stop. A pass claims as many due tasks as there are free
// send slots; it runs when a notification arrives, when a send succeeded
// (that job's next task is now its oldest), when a retry this dispatcher
// scheduled is due, and at the latest a poll interval after the last
// pass. An outage is logged when it starts and when it ends, not every
// pass.
func (d *Dispatcher) Run(ctx context.Context) {
	d.defaults()
	wake := make(chan struct{}, 1)
	var listening atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); d.listen(ctx, wake, &listening) }()

	results := make(chan sent, d.Parallel) // never blocks a send: at most Parallel in flight
	inflight := 0
	var health outboxHealth
	passDue := true
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if passDue && inflight < d.Parallel {
			want := d.Parallel - inflight
			n, err := d.start(ctx, want, results, &wg)
			if ctx.Err() != nil {
				return
			}
			d.logHealth(health.claimed(err), err)
			inflight += n
			// A full claim may have left due tasks behind: claim again
			// as soon as a slot is free.
			passDue = n == want
			next = time.Now().Add(pollEvery(listening.Load(), d.Poll, d.DeafPoll))
		}
		// While a pass waits for a free slot, the timer has nothing to add.
		var tick <-chan time.Time
		if !passDue {
			timer.Reset(time.Until(next))
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case r := <-results:
			inflight--
			d.logHealth(health.sent(r), r.outage)
			switch {
			case r.ok:
				passDue = true // its job's next task is due now
			case r.outage != nil:
				// Wait for the outage's retry rather than try every
				// pending task against a Temporal that is down.
				passDue = false
			}
			if r.retryIn > 0 {
				next = earlier(next, time.Now().Add(r.retryIn))
			}
		case <-wake:
			passDue = true
		case <-tick:
			passDue = true
		}
	}
}

// logHealth logs a change between paused and dispatching.
func (d *Dispatcher) logHealth(change healthChange, err error) {
	switch change {
	case nowPaused:
		d.Log.Warn("outbox dispatch paused", "err", err)
	case nowResumed:
		d.Log.Info("outbox dispatch resumed")
	}
}

// Pass is one pass of Run with every send slot free: it claims up to
// Parallel due tasks, sends them at once and returns how many Temporal
// accepted. A task whose send fails is given back with its own backoff;
// the others still go. The error is the claim's, or Temporal being
// unreachable.
func (d *Dispatcher) Pass(ctx context.Context) (int, error) {
	d.defaults()
	results := make(chan sent, d.Parallel)
	var wg sync.WaitGroup
	n, err := d.start(ctx, d.Parallel, results, &wg)
	if err != nil {
		return 0, err
	}
	wg.Wait()
	close(results)
	accepted := 0
	for r := range results {
		if r.ok {
			accepted++
		}
		if r.outage != nil {
			err = fmt.Errorf("temporal unreachable: %w", r.outage)
		}
	}
	if err == nil && accepted < n {
		err = ctx.Err()
	}
	return accepted, err
}

// start claims up to n due tasks (at most one per job) and sends each on
// a goroutine of wg's, which reports on results; it returns how many it
// claimed.
func (d *Dispatcher) start(ctx context.Context, n int, results chan<- sent, wg *sync.WaitGroup) (int, error) {
	if d.Hooks != nil && d.Hooks.BeforeClaim != nil {
		if err := d.Hooks.BeforeClaim(ctx); err != nil {
			return 0, fmt.Errorf("outbox held (test hook): %w", err)
		}
	}
	claimed := time.Now() // no later than the leases' start in the database
	tasks, err := d.Store.ClaimTasks(ctx, n, d.Lease)
	if err != nil {
		return 0, err
	}
	for _, task := range tasks {
		wg.Add(1)
		go func() { defer wg.Done(); results <- d.dispatch(ctx, task, claimed) }()
	}
	return len(tasks), nil
}

// dispatch sends one claimed task, or gives it back to be retried.
func (d *Dispatcher) dispatch(ctx context.Context, task store.Task, claimed time.Time) sent {
	if time.Since(claimed) > d.Lease-d.SendTimeout {
		// The claim itself took so long (a struggling database) that the
		// lease could run out during this send, and another dispatcher
		// send the task too (after the job's workflow has idled out, a
		// run_now would run twice). It waits for the lease to end; another
		// pass, here or elsewhere, takes it.
		d.Log.Warn("outbox claim outlasted its lease; leaving the task", "task", task.ID, "job", task.CronJobID)
		return sent{}
	}
	err := d.send(ctx, task)
	if err == nil {
		return sent{ok: true}
	}
	if ctx.Err() != nil {
		return sent{} // shutting down; the lease frees it
	}
	f := classify(err, task.Attempts)
	if !f.outage {
		d.Log.Warn("outbox task not dispatched; backing off", "task", task.ID, "job", task.CronJobID,
			"action", task.Action, "attempts", task.Attempts+1, "retry_in", f.retryIn, "err", err)
	}
	if err := d.Store.RetryTask(ctx, task.ID, f.retryIn, !f.outage, err.Error()); err != nil {
		d.Log.Warn("give back outbox task; its lease frees it", "task", task.ID, "err", err)
		return sent{}
	}
	if f.outage {
		return sent{outage: err, retryIn: f.retryIn}
	}
	return sent{retryIn: f.retryIn}
}

// listen holds a listening session and pokes wake for every notification,
// and once whenever it (re)connects, for what was queued while it was
// down. A lost session is reconnected with backoff; listening is false
// meanwhile, and Run polls at DeafPoll.
func (d *Dispatcher) listen(ctx context.Context, wake chan<- struct{}, listening *atomic.Bool) {
	failures := 0
	for {
		err := d.listenOnce(ctx, wake, func() {
			failures = 0
			listening.Store(true)
			d.Log.Info("outbox listener connected")
		})
		listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		poke(wake) // the next pass schedules the deaf poll
		delay := reconnectDelay(failures)
		failures++
		d.Log.Warn("outbox listener down; polling until it listens again", "err", err, "poll", d.DeafPoll, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// listenOnce listens on one session until it fails or ctx ends.
func (d *Dispatcher) listenOnce(ctx context.Context, wake chan<- struct{}, connected func()) error {
	cctx, cancel := context.WithTimeout(ctx, d.SendTimeout)
	l, err := d.Store.ListenOutbox(cctx)
	cancel()
	if err != nil {
		return err
	}
	defer l.Close()
	connected()
	poke(wake)
	for {
		wctx, cancel := context.WithTimeout(ctx, d.ListenCheck)
		err := l.Wait(wctx)
		quiet := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			poke(wake)
		case !quiet:
			return err
		default:
			pctx, cancel := context.WithTimeout(ctx, d.SendTimeout)
			err := l.Ping(pctx)
			cancel()
			if err != nil {
				return err
			}
		}
	}
}

// poke asks Run for a pass; one asked and not yet taken is enough.
func poke(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// send signals the task's job workflow, then marks the task. If marking
// fails the lease runs out and the task goes again: the workflow ignores
// the duplicate.
func (d *Dispatcher) send(ctx context.Context, task store.Task) error {
	sctx, cancel := context.WithTimeout(ctx, d.SendTimeout)
	defer cancel()
	_, err := d.Temporal.SignalWithStartWorkflow(sctx, workflows.JobWorkflowID(task.CronJobID), workflows.SignalChange,
		workflows.Change{TaskID: task.ID, Action: task.Action, Version: task.Version, RunKey: task.RunKey},
		client.StartWorkflowOptions{TaskQueue: workflows.CoreTaskQueue},
		workflows.JobWorkflow, workflows.JobInput{JobID: task.CronJobID, NodeTimeout: d.NodeTimeout})
	if err != nil {
		return fmt.Errorf("signal %s: %w", workflows.JobWorkflowID(task.CronJobID), err)
	}
	if d.Hooks != nil && d.Hooks.AfterSignal != nil {
		if err := d.Hooks.AfterSignal(ctx, task); err != nil {
			return fmt.Errorf("task %d sent, not marked (test hook): %w", task.ID, err)
		}
	}
	if err := d.Store.MarkDispatched(ctx, task.ID); err != nil {
		d.Log.Warn("task sent but not marked; it will be sent again", "task", task.ID, "err", err)
		return nil
	}
	d.Metrics.Dispatched(task.CreatedAt, time.Now())
	return nil
}
