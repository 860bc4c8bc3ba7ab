package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/hostcron/hostcron/internal/wire"
)

// ConvergeNode brings one node to the desired state of its shard with a
// single reconcile (so at most one daemon-reload), and reports what it
// changed. It runs when a node announces itself and periodically, to
// repair drift.
func ConvergeNode(ctx workflow.Context, in ConvergeInput) (ConvergeResult, error) {
	if in.NodeTimeout <= 0 {
		in.NodeTimeout = 2 * time.Minute
	}
	var rep wire.NodeReport
	var err error
	if workflow.GetVersion(ctx, pagedChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		rep, err = reconcileWithSet(ctx, in)
	} else {
		err = workflow.ExecuteActivity(convergeCtx(ctx, in.NodeID, in.NodeTimeout), node.ReconcileFromCore,
			wire.DesiredSetRef{NodeID: in.NodeID}).Get(ctx, &rep)
		noteConverge(ctx, in.NodeID, err)
		if err != nil {
			err = fmt.Errorf("reconcile node %s: %w", in.NodeID, err)
		}
	}
	if err != nil {
		return ConvergeResult{}, err
	}
	res := ConvergeResult{NodeID: in.NodeID, Jobs: rep.Desired, Written: rep.Written, Removed: rep.Removed,
		Enabled: rep.Enabled, Disabled: rep.Disabled, Failed: rep.Failed, Kept: rep.Kept, Stale: rep.Stale,
		Reloads: rep.Reloads, Omitted: rep.Omitted}
	workflow.GetLogger(ctx).Info("node converged", "node", in.NodeID, "jobs", res.Jobs,
		"written", len(res.Written), "removed", len(res.Removed), "reloads", res.Reloads, "names_omitted", res.Omitted)
	return res, nil
}

// ConvergeMaxDuration bounds one attempt of a node's reconcile, and
// ConvergeHeartbeat is how long the node may go silent during it. A first
// converge of a large shard onto an empty node writes, reloads and enables
// thousands of units (30 s for 10,000 on a quiet machine, longer on a busy
// one): under nodeCtx's 60 s per attempt it timed out, and every retry
// started over, so such a node never converged. A node that died is
// noticed by its missing heartbeat instead.
const (
	ConvergeMaxDuration = 10 * time.Minute
	ConvergeHeartbeat   = 30 * time.Second
)

// convergeCtx routes a converge's reconcile to one node: a node that does
// not take it within timeout (down, or its agent not running) fails it,
// as nodeCtx does; one that took it may work up to ConvergeMaxDuration an
// attempt as long as it heart-beats.
func convergeCtx(ctx workflow.Context, nodeID string, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              NodeTaskQueue(nodeID),
		ScheduleToStartTimeout: timeout,
		ScheduleToCloseTimeout: timeout + ConvergeMaxDuration,
		StartToCloseTimeout:    ConvergeMaxDuration,
		HeartbeatTimeout:       ConvergeHeartbeat,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second},
	})
}

// pagedChange is the GetVersion change id of converges that hand the node
// a reference (wire.DesiredSetRef) and let it read its desired set from
// the core in pages (ReconcileFromCore), instead of reading the set in a
// core activity and passing it to Reconcile: the set no longer travels as
// a Temporal payload, whose 2 MiB limit a shard of a few thousand jobs
// exceeded (docs/scale.md). A run started before it replays the old path
// (reconcileWithSet) with its own activities, which stay registered. In a
// rolling deploy a new run may meet a node agent from before it: the old
// agent does not know ReconcileFromCore and fails each attempt, retried
// until the node timeout, and the converge fails (recorded as such) until
// the agent is upgraded; so upgrade node agents before the core
// (docs/semantics.md, "Paged desired sets").
const pagedChange = "desired-set-paged"

// reconcileWithSet is the converge from before pagedChange: the core
// reads the set and hands it to the node as the Reconcile activity's
// input. Replays of runs started before pagedChange only.
func reconcileWithSet(ctx workflow.Context, in ConvergeInput) (wire.NodeReport, error) {
	set, err := desiredSet(ctx, in.NodeID)
	if err != nil {
		return wire.NodeReport{}, fmt.Errorf("desired set: %w", err)
	}
	var rep wire.NodeReport
	err = workflow.ExecuteActivity(nodeCtx(ctx, in.NodeID, in.NodeTimeout), node.Reconcile, set.Jobs, set.Snapshot).Get(ctx, &rep)
	noteConverge(ctx, in.NodeID, err)
	if err != nil {
		return wire.NodeReport{}, fmt.Errorf("reconcile node %s: %w", in.NodeID, err)
	}
	rep.Desired = len(set.Jobs)
	return rep, nil
}

// noteChange is the GetVersion change id of recording each converge's
// result (NoteConverge): a run from before it replays without the
// activity.
const noteChange = "converge-noted"

// noteConverge records the reconcile's result for the operator's
// node_not_converged. Best effort, a few attempts: a converge does not
// fail because its bookkeeping did, and the housekeeping leader's
// periodic check still notices a node whose converges stop being
// recorded.
func noteConverge(ctx workflow.Context, nodeID string, reconcileErr error) {
	if workflow.GetVersion(ctx, noteChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	errText := ""
	if reconcileErr != nil {
		errText = reconcileErr.Error()
	}
	nctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           CoreTaskQueue,
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	})
	if err := workflow.ExecuteActivity(nctx, core.NoteConverge, nodeID, errText).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("converge result not recorded", "node", nodeID, "err", err)
	}
}

// snapshotChange is the GetVersion change id of desired sets that carry
// their snapshot. A run started before it recorded a bare job list from
// DesiredForNode; on replay it reads that list and sends the zero
// snapshot, which removes no orphan. A run after it calls
// DesiredSetForNode: each side has its own activity, so a result is never
// decoded as the other side's type (an old run's read completed by a new
// worker, a new run's read served by an old worker in a rolling deploy:
// the old worker does not know the name and fails the attempt, which is
// retried until a new worker takes it).
const snapshotChange = "desired-set-snapshot"

func desiredSet(ctx workflow.Context, nodeID string) (wire.DesiredSet, error) {
	var set wire.DesiredSet
	if workflow.GetVersion(ctx, snapshotChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return set, workflow.ExecuteActivity(coreCtx(ctx), core.DesiredForNode, nodeID).Get(ctx, &set.Jobs)
	}
	return set, workflow.ExecuteActivity(coreCtx(ctx), core.DesiredSetForNode, nodeID).Get(ctx, &set)
}

// ConvergeShard converges every node of a shard in parallel, each as its
// own child workflow, and returns their results (a node that is down is
// reported, not waited for past its timeout).
func ConvergeShard(ctx workflow.Context, shardID string) ([]ConvergeResult, error) {
	var nodes []string
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.ShardNodes, shardID).Get(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("shard nodes: %w", err)
	}
	var futures []workflow.ChildWorkflowFuture
	for _, id := range nodes {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: ConvergeNodeWorkflowID(id) + "-periodic-" + workflow.GetInfo(ctx).WorkflowExecution.RunID,
			TaskQueue:  CoreTaskQueue,
		})
		futures = append(futures, workflow.ExecuteChildWorkflow(cctx, ConvergeNode, ConvergeInput{NodeID: id}))
	}
	var results []ConvergeResult
	for i, f := range futures {
		var r ConvergeResult
		if err := f.Get(ctx, &r); err != nil {
			r = ConvergeResult{NodeID: nodes[i], Failed: []string{err.Error()}}
		}
		results = append(results, r)
	}
	return results, nil
}

// ConvergeAll converges every shard; a Temporal schedule runs it
// periodically.
func ConvergeAll(ctx workflow.Context) error {
	var shards []string
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.AllShards).Get(ctx, &shards); err != nil {
		return fmt.Errorf("shards: %w", err)
	}
	var futures []workflow.ChildWorkflowFuture
	for _, id := range shards {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{TaskQueue: CoreTaskQueue})
		futures = append(futures, workflow.ExecuteChildWorkflow(cctx, ConvergeShard, id))
	}
	for _, f := range futures {
		if err := f.Get(ctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("shard converge failed", "err", err)
		}
	}
	return nil
}
