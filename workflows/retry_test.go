package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/wire"
)

// Issue 12 (h): after a Temporal outage every change that waited reaches
// each node at once; one node's attempt of a schedule change is lost or
// queued past the node timeout (the other nodes take it). The job must
// not end failed with that live node on the old schedule: the node that
// timed out is asked again before the verdict.
func TestJobWorkflowAsksATimedOutNodeAgain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deleting bool
	}{{"apply", false}, {"delete", true}} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, tc.deleting, "node1", "node2", "node3"), nil)
			var mu sync.Mutex
			calls := map[string]int{}
			answer := func(ctx context.Context) (wire.NodeReport, error) {
				mu.Lock()
				defer mu.Unlock()
				q := activityTaskQueue(ctx)
				calls[q]++
				if strings.HasSuffix(q, "id-node2") && calls[q] == 1 {
					return wire.NodeReport{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil)
				}
				return wire.NodeReport{}, nil
			}
			if tc.deleting {
				env.OnActivity(node.RemoveUnits, mock.Anything, mock.Anything, mock.Anything).Return(
					func(ctx context.Context, _ []string, _ int64) (wire.NodeReport, error) { return answer(ctx) })
				env.OnActivity(core.FinishDelete, mock.Anything, jobID).Return(nil).Once()
			} else {
				env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
					func(ctx context.Context, _ []wire.Job) (wire.NodeReport, error) { return answer(ctx) })
				env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", 3).Return(true, nil).Once()
			}
			signalAndRun(env, Change{TaskID: 13, Action: wire.ActionUpdate, Version: 7})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			env.AssertExpectations(t)
			if n := calls[NodeTaskQueue("id-node2")]; n != 2 {
				t.Errorf("node2 asked %d times, want 2", n)
			}
			if n := calls[NodeTaskQueue("id-node1")]; n != 1 {
				t.Errorf("node1 asked %d times, want 1 (it answered)", n)
			}
		})
	}
}

// A node that refused the work (a non-retryable error) is not asked again:
// the verdict names it at once.
func TestJobWorkflowDoesNotAskARefusingNodeAgain(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2"), nil)
	var mu sync.Mutex
	n2 := 0
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, _ []wire.Job) (wire.NodeReport, error) {
			if strings.HasSuffix(activityTaskQueue(ctx), "id-node2") {
				mu.Lock()
				n2++
				mu.Unlock()
				return wire.NodeReport{}, temporal.NewNonRetryableApplicationError("bad", "ApplyFailed", nil)
			}
			return wire.NodeReport{}, nil
		})
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusFailed, mock.Anything, 1).Return(true, nil).Once()
	signalAndRun(env, Change{TaskID: 13, Action: wire.ActionUpdate, Version: 7})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	env.AssertExpectations(t)
	if n2 != 1 {
		t.Errorf("node2 asked %d times, want 1", n2)
	}
}
