// Package dispatch hands the core's outbox of job changes to Temporal: each
// change becomes a signal-with-start of the job's workflow, which applies
// changes to one job in order. A change is marked dispatched only after
// Temporal accepted it, so none is lost while Temporal is down.
package dispatch

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/workflows"
)

// Dispatcher polls the outbox.
type Dispatcher struct {
	Store       *store.Store
	Temporal    client.Client
	Log         *slog.Logger
	Interval    time.Duration // poll interval (default 200ms)
	NodeTimeout time.Duration // passed to job workflows
}

// Run dispatches until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	if d.Interval <= 0 {
		d.Interval = 200 * time.Millisecond
	}
	t := time.NewTicker(d.Interval)
	defer t.Stop()
	for {
		if err := d.dispatchPending(ctx); err != nil && ctx.Err() == nil {
			d.Log.Warn("outbox dispatch paused", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Dispatcher) dispatchPending(ctx context.Context) error {
	tasks, err := d.Store.PendingTasks(ctx, 100)
	if err != nil {
		return err
	}
	for _, task := range tasks {
		_, err := d.Temporal.SignalWithStartWorkflow(ctx, workflows.JobWorkflowID(task.CronJobID), workflows.SignalChange,
			workflows.Change{TaskID: task.ID, Action: task.Action, Version: task.Version},
			client.StartWorkflowOptions{TaskQueue: workflows.CoreTaskQueue},
			workflows.JobWorkflow, workflows.JobInput{JobID: task.CronJobID, NodeTimeout: d.NodeTimeout})
		if err != nil {
			return err // keep order: retry this task before later ones
		}
		if err := d.Store.MarkDispatched(ctx, task.ID); err != nil {
			return err
		}
	}
	return nil
}
