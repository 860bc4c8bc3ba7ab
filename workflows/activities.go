package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/wire"
)

// CoreActivities read and write the core's database.
type CoreActivities struct {
	Store *store.Store
}

// LoadJob returns the job's current state and its shard's nodes. A job
// that no longer exists yields Exists=false.
func (a *CoreActivities) LoadJob(ctx context.Context, jobID string) (JobPlan, error) {
	job, err := a.Store.GetJob(ctx, jobID)
	if errors.Is(err, store.ErrNotFound) {
		return JobPlan{}, nil
	}
	if err != nil {
		return JobPlan{}, err
	}
	d, shardID, err := a.Store.DesiredJob(ctx, jobID)
	if err != nil {
		return JobPlan{}, err
	}
	nodes, err := a.Store.ListNodes(ctx, shardID)
	if err != nil {
		return JobPlan{}, err
	}
	plan := JobPlan{Exists: true, Deleting: job.Status == wire.StatusDeleting, Version: job.Version, Job: d}
	for _, n := range nodes {
		plan.Nodes = append(plan.Nodes, NodeRef{ID: n.ID, Name: n.Name})
	}
	return plan, nil
}

// SetJobStatus records provisioning's verdict for a version; it changes
// nothing if the job moved on meanwhile.
func (a *CoreActivities) SetJobStatus(ctx context.Context, jobID string, version int64, status wire.Status, message string) (bool, error) {
	return a.Store.SetProvisioned(ctx, jobID, version, status, message)
}

// FinishDelete removes a job whose units are gone from its nodes.
func (a *CoreActivities) FinishDelete(ctx context.Context, jobID string) error {
	return a.Store.FinishDelete(ctx, jobID)
}

// DesiredForNode is every job the node's shard has.
func (a *CoreActivities) DesiredForNode(ctx context.Context, nodeID string) ([]wire.Job, error) {
	n, err := a.Store.GetNode(ctx, nodeID)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("unknown node", "NotFound", err)
	}
	return a.Store.DesiredJobs(ctx, n.ShardID)
}

// ShardNodes lists the nodes of a shard.
func (a *CoreActivities) ShardNodes(ctx context.Context, shardID string) ([]string, error) {
	nodes, err := a.Store.ListNodes(ctx, shardID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return ids, nil
}

// AllShards lists every shard.
func (a *CoreActivities) AllShards(ctx context.Context) ([]string, error) {
	return a.Store.ShardIDs(ctx)
}

// NodeActivities change one node's units; each node agent registers them
// on its own task queue. Every operation is idempotent.
type NodeActivities struct {
	Units *unitmgr.Manager
	// MinOrphanAge protects units written after a converge's snapshot.
	MinOrphanAge time.Duration
}

// ApplyJobs writes, enables or disables the given jobs.
func (a *NodeActivities) ApplyJobs(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	rep, err := a.Units.Apply(ctx, jobs)
	if err != nil {
		return rep, err
	}
	if len(rep.Failed) > 0 {
		// A bad job will not get better by retrying.
		return rep, temporal.NewNonRetryableApplicationError(fmt.Sprint(rep.Failed), "ApplyFailed", nil)
	}
	return rep, nil
}

// RemoveUnits stops and removes units by name.
func (a *NodeActivities) RemoveUnits(ctx context.Context, names []string) (wire.NodeReport, error) {
	return a.Units.Remove(ctx, names)
}

// Reconcile makes the node's units exactly jobs.
func (a *NodeActivities) Reconcile(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	return a.Units.Reconcile(ctx, jobs, a.MinOrphanAge)
}

// RunNow starts one run of a job outside its schedule.
func (a *NodeActivities) RunNow(ctx context.Context, unit string) error {
	return a.Units.RunNow(ctx, unit)
}
