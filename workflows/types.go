// Package workflows holds hostcron's Temporal workflows and activities:
// provisioning one cron job on every node of its shard, and converging a
// node to the desired set of jobs.
//
// Core activities run in the core API's worker on CoreTaskQueue; node
// activities run in each node agent's worker on NodeTaskQueue(nodeID), so
// a call to a node that is down waits in that node's queue only, bounded by
// its timeouts, and never blocks other nodes or tenants.
package workflows

import (
	"time"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// CoreTaskQueue is where the core's workflows and activities run.
const CoreTaskQueue = "hostcron-core"

// NodeTaskQueue is the task queue of one node's agent.
func NodeTaskQueue(nodeID string) string { return trust.NodeQueuePrefix + nodeID }

// SignalChange tells a job's workflow that the job changed.
const SignalChange = "change"

// JobWorkflowID is the one workflow per job that applies its changes in
// order.
func JobWorkflowID(jobID string) string { return "cronjob-" + jobID }

// ConvergeNodeWorkflowID names a node's converge run.
func ConvergeNodeWorkflowID(nodeID string) string { return "converge-node-" + nodeID }

// Change is one outbox task: what changed, at which version.
type Change struct {
	TaskID  int64       `json:"task_id"`
	Action  wire.Action `json:"action"`
	Version int64       `json:"version"`
	RunKey  string      `json:"run_key,omitempty"` // a cancel's run; a backfill's key (run_now)
}

// JobInput starts a job's workflow.
type JobInput struct {
	JobID string `json:"job_id"`
	// NodeTimeout bounds each node call, retries included; a node that is
	// down fails the provisioning after it (and gets the job when it
	// returns, through converge).
	NodeTimeout time.Duration `json:"node_timeout"`
	// IdleTimeout is how long the workflow waits for the next change
	// before it completes.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// LastTaskID is the highest outbox task id handled so far; a change
	// at or below it is a redelivery. Carried across continue-as-new.
	LastTaskID int64 `json:"last_task_id,omitempty"`
	// MaxBatches is how many batches one run handles before it continues
	// as new (default 100).
	MaxBatches int `json:"max_batches,omitempty"`
}

// NodeRef is a node a job must be on.
type NodeRef = wire.NodeRef

// JobPlan is what LoadJob returns: the job as nodes must have it and the
// nodes of its shard. The store builds it in one query.
type JobPlan = wire.JobPlan

// ConvergeInput starts a node's converge.
type ConvergeInput struct {
	NodeID      string        `json:"node_id"`
	NodeTimeout time.Duration `json:"node_timeout"`
}

// ConvergeResult is what a converge changed on the node.
type ConvergeResult struct {
	NodeID   string   `json:"node_id"`
	Jobs     int      `json:"jobs"`
	Written  []string `json:"written"`
	Removed  []string `json:"removed"`
	Enabled  []string `json:"enabled"`
	Disabled []string `json:"disabled"`
	Failed   []string `json:"failed"`
	Kept     []string `json:"kept,omitempty"`  // newer on the node than in the snapshot
	Stale    []string `json:"stale,omitempty"` // in the snapshot, but removed on the node at that version or later
	Reloads  int      `json:"reloads"`
	Omitted  int      `json:"omitted,omitempty"` // names left out of the lists above (wire.MaxReportNames)
}
