package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
)

// Dial connects to Temporal, retrying until ctx ends: a process that
// depends on it must be able to start before it and wait.
// secure sets the connection's TLS and the payload codec (see
// trust.Files.ApplyCore and ApplyNode); nil dials in the clear.
func Dial(ctx context.Context, addr, namespace string, secure func(*client.Options) error, log *slog.Logger) (client.Client, error) {
	opts := client.Options{HostPort: addr, Namespace: namespace,
		Logger: tlog.NewStructuredLogger(log.With("component", "temporal"))}
	if secure != nil {
		if err := secure(&opts); err != nil {
			return nil, fmt.Errorf("temporal trust: %w", err)
		}
	}
	for {
		c, err := client.DialContext(ctx, opts)
		if err == nil {
			return c, nil
		}
		log.Warn("temporal not reachable yet", "address", addr, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial temporal %s: %w", addr, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// StartCoreWorker runs the core's workflows and activities on
// CoreTaskQueue.
func StartCoreWorker(c client.Client, st CoreStore) (worker.Worker, error) {
	w := worker.New(c, CoreTaskQueue, worker.Options{})
	RegisterCore(w, &CoreActivities{Store: st})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start core worker: %w", err)
	}
	return w, nil
}

// Converger starts a node's converge; the API's announce endpoint uses it.
type Converger struct {
	Client      client.Client
	NodeTimeout time.Duration
}

// ConvergeNode starts (or joins) the node's converge.
func (v Converger) ConvergeNode(ctx context.Context, nodeID string) error {
	_, err := StartConvergeNode(ctx, v.Client, nodeID, v.NodeTimeout)
	return err
}

// RegisterCore registers the core's workflows and activities on w.
func RegisterCore(w worker.Worker, acts *CoreActivities) {
	w.RegisterWorkflow(JobWorkflow)
	w.RegisterWorkflow(ConvergeNode)
	w.RegisterWorkflow(ConvergeShard)
	w.RegisterWorkflow(ConvergeAll)
	w.RegisterActivity(acts)
}

// RegisterNode registers a node agent's activities on w.
func RegisterNode(w worker.Worker, acts *NodeActivities) {
	w.RegisterActivity(acts)
}

// StartConvergeNode starts a node's converge, or joins the one running.
func StartConvergeNode(ctx context.Context, c client.Client, nodeID string, nodeTimeout time.Duration) (client.WorkflowRun, error) {
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       ConvergeNodeWorkflowID(nodeID),
		TaskQueue:                CoreTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, ConvergeNode, ConvergeInput{NodeID: nodeID, NodeTimeout: nodeTimeout})
}

// EnsureConvergeSchedule creates the schedule that converges every shard
// periodically, if it does not exist yet.
func EnsureConvergeSchedule(ctx context.Context, c client.Client, every time.Duration) error {
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      "hostcron-converge-all",
		Spec:    client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Action: &client.ScheduleWorkflowAction{
			ID: "converge-all", Workflow: ConvergeAll, TaskQueue: CoreTaskQueue,
			WorkflowExecutionTimeout: every,
		},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create converge schedule: %w", err)
	}
	return nil
}
