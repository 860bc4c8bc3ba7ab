package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/hostcron/hostcron/internal/wire"
)

const jobID = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(JobWorkflow)
	env.RegisterWorkflow(ConvergeNode)
	env.RegisterWorkflow(ConvergeShard)
	env.RegisterActivity(&CoreActivities{})
	env.RegisterActivity(&NodeActivities{})
	return env
}

func plan(enabled, deleting bool, nodes ...string) JobPlan {
	p := JobPlan{Exists: true, Deleting: deleting, Version: 7,
		Job: wire.Job{ID: jobID, Tenant: "acme", Version: 7, Enabled: enabled}}
	for _, n := range nodes {
		p.Nodes = append(p.Nodes, NodeRef{ID: "id-" + n, Name: n})
	}
	return p
}

// signalAndRun starts JobWorkflow with one change queued, as the
// dispatcher's signal-with-start does.
func signalAndRun(env *testsuite.TestWorkflowEnvironment, changes ...Change) {
	env.RegisterDelayedCallback(func() {
		for _, c := range changes {
			env.SignalWorkflow(SignalChange, c)
		}
	}, 0)
	env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: time.Minute, IdleTimeout: time.Second})
}

func TestJobWorkflowActiveOnEveryNode(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2", "node3"), nil).Once()
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(wire.NodeReport{Reloads: 1}, nil).Times(3)
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "").Return(true, nil).Once()
	signalAndRun(env, Change{Action: wire.ActionCreate, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

func TestJobWorkflowFailedNamesTheNode(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2"), nil)
	var msg string
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
			if strings.HasSuffix(activityTaskQueue(ctx), "id-node2") {
				return wire.NodeReport{}, temporal.NewNonRetryableApplicationError("node2 is down", "Down", nil)
			}
			return wire.NodeReport{}, nil
		})
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusFailed, mock.Anything).Return(
		func(ctx context.Context, id string, v int64, status wire.Status, message string) (bool, error) {
			msg = message
			return true, nil
		}).Once()
	signalAndRun(env, Change{Action: wire.ActionCreate, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "node2") || strings.Contains(msg, "node1") {
		t.Errorf("status message %q should name node2 only", msg)
	}
}

func TestJobWorkflowDisabledJob(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(false, false, "node1"), nil)
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.MatchedBy(func(j []wire.Job) bool { return len(j) == 1 && !j[0].Enabled })).
		Return(wire.NodeReport{}, nil).Once()
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusDisabled, "").Return(true, nil).Once()
	signalAndRun(env, Change{Action: wire.ActionDisable, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

func TestJobWorkflowDelete(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(false, true, "node1", "node2"), nil)
	// The delete's version goes to the nodes: their tombstones refuse up to it.
	env.OnActivity(node.RemoveUnits, mock.Anything, []string{"cron-acme-" + jobID}, int64(7)).Return(wire.NodeReport{}, nil).Times(2)
	env.OnActivity(core.FinishDelete, mock.Anything, jobID).Return(nil).Once()
	signalAndRun(env, Change{Action: wire.ActionDelete, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

// TestJobWorkflowCoalescesQueuedChanges: changes queued together are one
// batch that applies the newest state once.
func TestJobWorkflowCoalescesQueuedChanges(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1"), nil).Once()
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(wire.NodeReport{}, nil).Once()
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "").Return(true, nil).Once()
	signalAndRun(env, Change{Action: wire.ActionEnable, Version: 5}, Change{Action: wire.ActionDisable, Version: 6}, Change{Action: wire.ActionEnable, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

func TestJobWorkflowRunNow(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2"), nil)
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(wire.NodeReport{}, nil)
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "").Return(true, nil)
	env.OnActivity(node.RunNow, mock.Anything, wire.RunNowRequest{Unit: "cron-acme-" + jobID, Request: "42"}).Return(nil).Once()
	signalAndRun(env, Change{TaskID: 42, Action: wire.ActionRunNow, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

func TestConvergeNodeReconcilesOnce(t *testing.T) {
	env := newEnv(t)
	jobs := []wire.Job{{ID: "a", Tenant: "acme"}, {ID: "b", Tenant: "acme"}}
	snap := wire.Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{101}}
	env.OnActivity(core.DesiredForNode, mock.Anything, "n1").Return(wire.DesiredSet{Jobs: jobs, Snapshot: snap}, nil).Once()
	// The node gets the snapshot with the jobs: it decides orphans by it.
	env.OnActivity(node.Reconcile, mock.Anything, jobs, snap).Return(wire.NodeReport{Written: []string{"x.timer"}, Reloads: 1}, nil).Once()
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1"})
	var res ConvergeResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 2 || res.Reloads != 1 || len(res.Written) != 1 {
		t.Errorf("result %+v", res)
	}
	env.AssertExpectations(t)
}

func TestConvergeNodeFailsWhenNodeUnreachable(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.DesiredForNode, mock.Anything, "n1").Return(wire.DesiredSet{}, nil)
	env.OnActivity(node.Reconcile, mock.Anything, mock.Anything).Return(wire.NodeReport{}, errors.New("unreachable"))
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1", NodeTimeout: 5 * time.Second})
	if err := env.GetWorkflowError(); err == nil {
		t.Error("converge of an unreachable node succeeded")
	}
}

func activityTaskQueue(ctx context.Context) string { return activity.GetInfo(ctx).TaskQueue }

// RunNow on a node that cannot take it holds the job's workflow (no other
// change of the job is applied meanwhile), so a failing node is left
// quickly: an error that may pass is tried a bounded number of times, a
// final one (the unit is not on the node) once, and the next node is
// asked within seconds, not after the activity's whole deadline.
func TestRunNowMovesOnFromAFailingNode(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		calls int // on node1
	}{
		{"unit not on the node (final)", temporal.NewNonRetryableApplicationError("run now: not possible on this node: cron-acme-x is not on this node", "RunNowNotHere", nil), 1},
		{"an error that may pass", errors.New("dbus: connection closed"), runNowAttempts},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2"), nil)
			env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(wire.NodeReport{}, nil)
			env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "").Return(true, nil)
			var first, reached time.Time
			calls := 0
			env.OnActivity(node.RunNow, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ wire.RunNowRequest) error {
				if activityTaskQueue(ctx) == NodeTaskQueue("id-node1") {
					calls++
					if first.IsZero() {
						first = env.Now()
					}
					return tt.err
				}
				reached = env.Now()
				return nil
			})
			signalAndRun(env, Change{TaskID: 42, Action: wire.ActionRunNow, Version: 7})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if calls != tt.calls || reached.IsZero() || reached.Sub(first) > 30*time.Second {
				t.Fatalf("%d attempts on node1, node2 asked %v after the first (zero: never): want %d attempts and node2 within seconds",
					calls, reached.Sub(first), tt.calls)
			}
		})
	}
}

// A node that is down never picks RunNow up: the workflow moves on after
// ScheduleToStartTimeout, bounded by the node timeout and a minute, while
// the node that does pick it up may wait the request's TTL.
func TestRunNowOptions(t *testing.T) {
	for _, timeout := range []time.Duration{time.Minute, 10 * time.Second, 5 * time.Minute} {
		o := runNowOptions("id-node1", timeout)
		if o.ScheduleToStartTimeout <= 0 || o.ScheduleToStartTimeout > min(timeout, time.Minute) {
			t.Errorf("node timeout %v: ScheduleToStartTimeout %v", timeout, o.ScheduleToStartTimeout)
		}
		if o.ScheduleToCloseTimeout < wire.RunNowTTL || o.HeartbeatTimeout != RunNowHeartbeat || o.RetryPolicy.MaximumAttempts != runNowAttempts {
			t.Errorf("node timeout %v: options %+v", timeout, o)
		}
	}
}
