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
// own, so one stuck job does not stall the others.
package dispatch

import (
	"context"
	"fmt"
	"log/slog"
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

// Dispatcher polls the outbox.
type Dispatcher struct {
	Store       *store.Store
	Temporal    Signaler
	Log         *slog.Logger
	Interval    time.Duration // poll interval (default 200ms)
	NodeTimeout time.Duration // passed to job workflows
	Batch       int           // tasks claimed per pass (default 100)
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
	// BeforeClaim runs at the start of every pass, before anything is
	// claimed. If it returns an error the pass claims and sends nothing
	// (as during an outage); a test holds the outbox back by blocking in
	// it (tests/faults/control fills a shard through a converge first).
	BeforeClaim func(ctx context.Context) error
}

func (d *Dispatcher) defaults() {
	if d.Interval <= 0 {
		d.Interval = 200 * time.Millisecond
	}
	if d.Batch <= 0 {
		d.Batch = 100
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

// Run dispatches until ctx ends. After a pass that sent something it
// goes again at once: the jobs' next tasks have just become eligible. An
// outage is logged when it starts and when it ends, not every pass.
func (d *Dispatcher) Run(ctx context.Context) {
	d.defaults()
	t := time.NewTicker(d.Interval)
	defer t.Stop()
	paused := false
	for {
		sent, err := d.Pass(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !paused:
			d.Log.Warn("outbox dispatch paused", "err", err)
		case err == nil && paused:
			d.Log.Info("outbox dispatch resumed")
		}
		paused = err != nil
		if err == nil && sent > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass claims the due tasks and sends each; it returns how many Temporal
// accepted. A task whose send fails is given back with its own backoff;
// the others still go.
func (d *Dispatcher) Pass(ctx context.Context) (int, error) {
	d.defaults()
	if d.Hooks != nil && d.Hooks.BeforeClaim != nil {
		if err := d.Hooks.BeforeClaim(ctx); err != nil {
			return 0, fmt.Errorf("outbox held (test hook): %w", err)
		}
	}
	claimed := time.Now() // no later than the lease's start in the database
	tasks, err := d.Store.ClaimTasks(ctx, d.Batch, d.Lease)
	if err != nil {
		return 0, err
	}
	sent := 0
	for i, task := range tasks {
		if time.Since(claimed) > d.Lease-d.SendTimeout {
			// The lease could run out during this send, and another
			// dispatcher send the task too (after the job's workflow has
			// idled out, a run_now would run twice). The rest wait for
			// the lease to end; another pass, here or elsewhere, takes them.
			d.Log.Warn("outbox batch outlasted its lease; leaving the rest", "unsent", len(tasks)-i)
			return sent, nil
		}
		err := d.send(ctx, task)
		if err == nil {
			sent++
			continue
		}
		if ctx.Err() != nil {
			return sent, ctx.Err() // shutting down; the lease frees the rest
		}
		f := classify(err, task.Attempts)
		if f.outage {
			// Temporal is unreachable: give back this task and the rest
			// without blaming them, and wait for the next pass.
			d.giveBack(ctx, tasks[i:], f, err)
			return sent, fmt.Errorf("temporal unreachable: %w", err)
		}
		d.Log.Warn("outbox task not dispatched; backing off", "task", task.ID, "job", task.CronJobID,
			"action", task.Action, "attempts", task.Attempts+1, "retry_in", f.retryIn, "err", err)
		d.giveBack(ctx, tasks[i:i+1], f, err)
	}
	return sent, nil
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

func (d *Dispatcher) giveBack(ctx context.Context, tasks []store.Task, f failure, cause error) {
	for _, t := range tasks {
		if err := d.Store.RetryTask(ctx, t.ID, f.retryIn, !f.outage, cause.Error()); err != nil {
			d.Log.Warn("give back outbox task; its lease frees it", "task", t.ID, "err", err)
		}
	}
}
