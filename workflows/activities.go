package workflows

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// The activities take the two sides through these small interfaces, not
// the concrete store and unit manager: the core API and the node agent
// both link this package, and neither must link the other's side (the
// database driver on the nodes, D-Bus in the core). cmd/core-api's deps
// test guards it.

// CoreStore is what the core's activities need of the database;
// *store.Store has it.
type CoreStore interface {
	JobPlan(ctx context.Context, jobID string) (wire.JobPlan, error)
	SetProvisioned(ctx context.Context, jobID string, version int64, status wire.Status, message string, took int) (bool, error)
	FinishDelete(ctx context.Context, jobID string) error
	NodeDesiredJobs(ctx context.Context, nodeID string) (jobs []wire.Job, ok bool, err error)
	ShardNodeIDs(ctx context.Context, shardID string) ([]string, error)
	ShardIDs(ctx context.Context) ([]string, error)
}

// NodeUnits is the node's unit manager as the node activities use it;
// *unitmgr.Manager has it.
type NodeUnits interface {
	Apply(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error)
	Remove(ctx context.Context, names []string) (wire.NodeReport, error)
	Reconcile(ctx context.Context, jobs []wire.Job, minOrphanAge time.Duration) (wire.NodeReport, error)
	RunNow(ctx context.Context, req wire.RunNowRequest) error
	State(ctx context.Context) ([]wire.UnitState, error)
}

// CoreActivities read and write the core's database.
type CoreActivities struct {
	Store CoreStore
}

// LoadJob returns the job's current state and its shard's nodes. A job
// that no longer exists yields Exists=false.
func (a *CoreActivities) LoadJob(ctx context.Context, jobID string) (JobPlan, error) {
	return a.Store.JobPlan(ctx, jobID)
}

// SetJobStatus records provisioning's verdict for a version; it changes
// nothing if the job moved on meanwhile. took is how many nodes have the
// version: the lost-run sweep never counts a slot no node had. (A task
// scheduled by a workflow worker older than the argument decodes it as
// 0: the sweep then starts at the job's next provisioning, never early.)
func (a *CoreActivities) SetJobStatus(ctx context.Context, jobID string, version int64, status wire.Status, message string, took int) (bool, error) {
	return a.Store.SetProvisioned(ctx, jobID, version, status, message, took)
}

// FinishDelete removes a job whose units are gone from its nodes.
func (a *CoreActivities) FinishDelete(ctx context.Context, jobID string) error {
	return a.Store.FinishDelete(ctx, jobID)
}

// DesiredForNode is every job the node's shard has.
func (a *CoreActivities) DesiredForNode(ctx context.Context, nodeID string) ([]wire.Job, error) {
	jobs, ok, err := a.Store.NodeDesiredJobs(ctx, nodeID)
	if err != nil {
		return nil, err // the database may come back: retried
	}
	if !ok {
		// A node that is not registered will not become so by retrying.
		return nil, temporal.NewNonRetryableApplicationError("unknown node "+nodeID, "NotFound", nil)
	}
	return jobs, nil
}

// ShardNodes lists the nodes of a shard.
func (a *CoreActivities) ShardNodes(ctx context.Context, shardID string) ([]string, error) {
	return a.Store.ShardNodeIDs(ctx, shardID)
}

// AllShards lists every shard.
func (a *CoreActivities) AllShards(ctx context.Context) ([]string, error) {
	return a.Store.ShardIDs(ctx)
}

// NodeActivities change one node's units; each node agent registers them
// on its own task queue. Every operation is idempotent.
type NodeActivities struct {
	Units NodeUnits
	// MinOrphanAge protects units written after a converge's snapshot.
	MinOrphanAge time.Duration
	// Admission is what this node accepts whatever a task says (see
	// trust.Admit): the last line if the core, its keys or its database
	// are wrong.
	Admission trust.Policy
}

// ApplyJobs writes, enables or disables the given jobs.
func (a *NodeActivities) ApplyJobs(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	admitted, refused := trust.Partition(jobs, a.Admission)
	rep, err := a.Units.Apply(ctx, admitted)
	rep.Failed = append(rep.Failed, refused...)
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
	if err := trust.AdmitUnits(names); err != nil {
		return wire.NodeReport{}, notAdmitted(err)
	}
	return a.Units.Remove(ctx, names)
}

// Reconcile makes the node's units exactly jobs.
func (a *NodeActivities) Reconcile(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	if err := trust.AdmitAll(jobs, a.Admission); err != nil {
		return wire.NodeReport{}, notAdmitted(err)
	}
	return a.Units.Reconcile(ctx, jobs, a.MinOrphanAge)
}

// RunNow starts one run of a job outside its schedule.
func (a *NodeActivities) RunNow(ctx context.Context, req wire.RunNowRequest) error {
	if err := trust.AdmitUnit(req.Unit); err != nil {
		return notAdmitted(err)
	}
	return a.Units.RunNow(ctx, req)
}

// notAdmitted fails a node task for good: a refused task will not be
// admitted on a retry.
func notAdmitted(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), "NotAdmitted", err)
}
