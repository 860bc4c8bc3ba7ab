package workflows

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// A batch of cancels alone asks every node of the shard to stop the run and
// provisions nothing (a node that is down must not hold the stop up); one
// node failing the request does not keep the others from it; a
// redelivered cancel is not sent again.
func TestJobWorkflowCancelAsksEveryNodeAndProvisionsNothing(t *testing.T) {
	env := newEnv(t)
	key := runkey.Manual(jobID, "8")
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1", "node2", "node3"), nil)
	var mu sync.Mutex
	asked := 0
	env.OnActivity(node.CancelRun, mock.Anything, wire.CancelRequest{Unit: "cron-acme-" + jobID, RunKey: key}).Return(
		func(ctx context.Context, req wire.CancelRequest) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			asked++
			if asked == 1 {
				return false, errors.New("node busy") // retried by Temporal, the others asked meanwhile
			}
			return asked == 2, nil
		})
	signalAndRun(env, Change{TaskID: 9, Action: wire.ActionCancel, RunKey: key}, Change{TaskID: 9, Action: wire.ActionCancel, RunKey: key})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	// Three nodes, one retry, the redelivery dropped; nothing provisioned
	// (ApplyJobs has no mock: a call would fail the workflow).
	if asked != 4 {
		t.Errorf("CancelRun ran %d times, want 4 (three nodes, one retried; the redelivered task not again)", asked)
	}
}

func TestBatchOrdersCancelsAroundItsRunNow(t *testing.T) {
	own, other := runkey.Manual(jobID, "12"), runkey.Scheduled(jobID, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	var b batch
	for _, c := range []Change{
		{TaskID: 10, Action: wire.ActionCancel, RunKey: own},
		{TaskID: 11, Action: wire.ActionCancel, RunKey: other},
		{TaskID: 12, Action: wire.ActionRunNow},
		{TaskID: 13, Action: wire.ActionCancel, RunKey: other},
	} {
		b.add(c)
	}
	first, after := b.cancelsAround(jobID)
	if !reflect.DeepEqual(first, []string{other}) || !reflect.DeepEqual(after, []string{own}) || !b.provision || b.runNow != "12" {
		t.Fatalf("first %q after %q provision %v runNow %q: want the other run's cancel first (once), the run-now's after it", first, after, b.provision, b.runNow)
	}
	var cancelsOnly batch
	cancelsOnly.add(Change{TaskID: 14, Action: wire.ActionCancel, RunKey: other})
	if cancelsOnly.provision {
		t.Fatal("a batch of cancels alone provisions")
	}
}
