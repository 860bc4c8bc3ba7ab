package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

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
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", 3).Return(true, nil).Once()
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
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusFailed, mock.Anything, 1).Return(
		func(ctx context.Context, id string, v int64, status wire.Status, message string, took int) (bool, error) {
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

// The verdict tells how many nodes took the job: none when every node
// failed, or when the shard has no node at all (then the job is active
// on every node of none). The lost-run sweep does not start on 0.
func TestJobWorkflowReportsHowManyNodesTookIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []string
		status wire.Status
	}{
		{"every node fails", []string{"node1", "node2"}, wire.StatusFailed},
		{"a shard without nodes", nil, wire.StatusActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, tc.nodes...), nil)
			env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
				wire.NodeReport{}, temporal.NewNonRetryableApplicationError("down", "Down", nil)).Maybe()
			env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), tc.status, mock.Anything, 0).Return(true, nil).Once()
			signalAndRun(env, Change{Action: wire.ActionCreate, Version: 7})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			env.AssertExpectations(t)
		})
	}
}

// A node that refuses the apply by its tombstone does not run the job:
// the job is not reported active.
func TestJobWorkflowStaleOnANodeIsNotActive(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2"), nil)
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
			if strings.HasSuffix(activityTaskQueue(ctx), "id-node1") {
				return wire.NodeReport{Stale: []string{jobs[0].UnitName()}}, nil
			}
			return wire.NodeReport{}, nil
		})
	var msg string
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusFailed, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, id string, v int64, status wire.Status, message string, took int) (bool, error) {
			msg = message
			return true, nil
		}).Once()
	signalAndRun(env, Change{Action: wire.ActionCreate, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
	if !strings.Contains(msg, "node1") || !strings.Contains(msg, "tombstone") || strings.Contains(msg, "node2") {
		t.Errorf("status message %q should name node1's tombstone only", msg)
	}
}

func TestJobWorkflowDisabledJob(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(false, false, "node1"), nil)
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.MatchedBy(func(j []wire.Job) bool { return len(j) == 1 && !j[0].Enabled })).
		Return(wire.NodeReport{}, nil).Once()
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusDisabled, "", 1).Return(true, nil).Once()
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
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", 1).Return(true, nil).Once()
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
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", 2).Return(true, nil)
	env.OnActivity(node.RunNow, mock.Anything, wire.RunNowRequest{Unit: "cron-acme-" + jobID, Request: "42"}).Return(nil).Once()
	signalAndRun(env, Change{TaskID: 42, Action: wire.ActionRunNow, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
}

// A converge hands the node a reference, not its set: no core activity
// reads the set, and the node's one reconcile reports how many jobs the
// set it read held.
func TestConvergeNodeReconcilesOnce(t *testing.T) {
	env := newEnv(t)
	var called []string
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		called = append(called, info.ActivityType.Name)
	})
	env.OnActivity(node.ReconcileFromCore, mock.Anything, wire.DesiredSetRef{NodeID: "n1"}).
		Return(wire.NodeReport{Written: []string{"x.timer"}, Reloads: 1, Desired: 2}, nil).Once()
	// The success is recorded: the operator's node_not_converged reads it.
	env.OnActivity(core.NoteConverge, mock.Anything, "n1", "").Return(nil).Once()
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1"})
	var res ConvergeResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Jobs != 2 || res.Reloads != 1 || len(res.Written) != 1 {
		t.Errorf("result %+v", res)
	}
	if strings.Join(called, " ") != "ReconcileFromCore NoteConverge" {
		t.Errorf("activities %q, want the node's ReconcileFromCore and the note only", called)
	}
	env.AssertExpectations(t)
}

// A converge's reconcile may outlast the node timeout's per-attempt bound
// (a first converge of a large shard onto an empty node) while the node
// heart-beats: it is scheduled with ConvergeMaxDuration per attempt and
// ConvergeHeartbeat, not nodeCtx's 60 s. A reconcile that overran 60 s
// used to time out and start over on every retry.
func TestConvergeNodeAllowsALongReconcile(t *testing.T) {
	env := newEnv(t)
	var info activity.Info
	env.SetOnActivityStartedListener(func(i *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if i.ActivityType.Name == "ReconcileFromCore" {
			info = *i
		}
	})
	env.OnActivity(node.ReconcileFromCore, mock.Anything, wire.DesiredSetRef{NodeID: "n1"}).
		Return(wire.NodeReport{Reloads: 1, Desired: 10000}, nil).Once()
	env.OnActivity(core.NoteConverge, mock.Anything, "n1", "").Return(nil).Once()
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1", NodeTimeout: time.Minute})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if info.HeartbeatTimeout != ConvergeHeartbeat {
		t.Errorf("reconcile heartbeat timeout %v, want %v", info.HeartbeatTimeout, ConvergeHeartbeat)
	}
	if got := info.Deadline.Sub(info.StartedTime); got < ConvergeMaxDuration-time.Second {
		t.Errorf("reconcile attempt deadline %v after its start, want %v", got, ConvergeMaxDuration)
	}
}

func TestConvergeNodeFailsWhenNodeUnreachable(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(node.ReconcileFromCore, mock.Anything, mock.Anything).Return(wire.NodeReport{}, errors.New("unreachable"))
	// The failure is recorded (node_not_converged), and a failure to
	// record it does not change the converge's own result.
	env.OnActivity(core.NoteConverge, mock.Anything, "n1", mock.MatchedBy(func(e string) bool { return strings.Contains(e, "unreachable") })).
		Return(errors.New("database down"))
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1", NodeTimeout: 5 * time.Second})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("converge of an unreachable node: %v", err)
	}
	env.AssertExpectations(t)
}

// A run from before converge results were recorded replays without
// recording one.
func TestConvergeNodeBeforeNotes(t *testing.T) {
	env := newEnv(t)
	env.OnGetVersion(noteChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion(pagedChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnActivity(core.DesiredSetForNode, mock.Anything, "n1").Return(wire.DesiredSet{}, nil)
	env.OnActivity(node.Reconcile, mock.Anything, mock.Anything, mock.Anything).Return(wire.NodeReport{}, nil)
	noted := false
	env.OnActivity(core.NoteConverge, mock.Anything, mock.Anything, mock.Anything).Return(func(context.Context, string, string) error {
		noted = true
		return nil
	}).Maybe()
	env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if noted {
		t.Error("an old run recorded its converge")
	}
}

func activityTaskQueue(ctx context.Context) string { return activity.GetInfo(ctx).TaskQueue }

// The desired set reached the node three ways, each behind a GetVersion
// gate and each with its own activities, whose argument and result types
// never change: a bare job list from DesiredForNode (before snapshots;
// Reconcile gets the zero snapshot), a wire.DesiredSet from
// DesiredSetForNode (before paging; Reconcile gets its snapshot), and now
// a reference the node reads its set by (ReconcileFromCore). A run from
// before a change replays its own path (its reads not yet done at the
// upgrade are still served: the old activities stay registered); a new
// run calls names an old worker does not serve, so it never decodes an
// old worker's answer as its own type.
func TestConvergeNodeDesiredSetAcrossVersions(t *testing.T) {
	jobs := []wire.Job{{ID: "a", Tenant: "acme"}}
	snap := wire.Snapshot{Xmin: 100, Xmax: 104}
	for _, tc := range []struct {
		name          string
		before        []string // changes the run predates
		wantSnap      wire.Snapshot
		wantActivites string
	}{
		{"new run", nil, snap, "ReconcileFromCore NoteConverge"},
		{"run from before paging", []string{pagedChange}, snap, "DesiredSetForNode Reconcile NoteConverge"},
		{"run from before snapshots", []string{pagedChange, snapshotChange}, wire.Snapshot{}, "DesiredForNode Reconcile NoteConverge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflow(ConvergeNode)
			// The real core activities, so their result types are encoded
			// and decoded as a worker would.
			env.RegisterActivity(&CoreActivities{Store: fakeStore{set: wire.DesiredSet{Jobs: jobs, Snapshot: snap}, known: true}})
			env.RegisterActivity(&NodeActivities{})
			for _, change := range tc.before {
				env.OnGetVersion(change, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
			}
			var called []string
			env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				called = append(called, info.ActivityType.Name)
			})
			env.OnActivity(node.Reconcile, mock.Anything, jobs, tc.wantSnap).Return(wire.NodeReport{}, nil).Maybe()
			env.OnActivity(node.ReconcileFromCore, mock.Anything, wire.DesiredSetRef{NodeID: "n1"}).Return(wire.NodeReport{Desired: 1}, nil).Maybe()
			env.OnActivity(core.NoteConverge, mock.Anything, "n1", "").Return(nil)
			env.ExecuteWorkflow(ConvergeNode, ConvergeInput{NodeID: "n1"})
			var res ConvergeResult
			if err := env.GetWorkflowResult(&res); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(called, " "); got != tc.wantActivites {
				t.Errorf("activities %q, want %q", got, tc.wantActivites)
			}
			if res.Jobs != 1 {
				t.Errorf("result counts %d jobs, want 1", res.Jobs)
			}
		})
	}
}

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
			env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", mock.Anything).Return(true, nil)
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
