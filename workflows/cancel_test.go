package workflows

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

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

// A run that started before cancels existed provisions on every batch, a
// cancel included, and asks no node to cancel (ApplyJobs runs; CancelRun
// has no mock, so a call would fail the workflow): the commands of such a
// history replay unchanged on either version of the core.
func TestJobWorkflowCancelBeforeTheChangeProvisions(t *testing.T) {
	env := newEnv(t)
	env.OnGetVersion(cancelChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	applies := provisionCounter(env)
	signalAndRun(env, Change{TaskID: 9, Action: wire.ActionCancel, RunKey: runkey.Manual(jobID, "8")})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if *applies != 1 {
		t.Errorf("ApplyJobs ran %d times, want the old behaviour's 1", *applies)
	}
}

// A provisioning cut short by a queued change (a node timed out, not yet
// asked again) is resumed by the next batch even when that batch is a
// cancel alone; the job is not left failed for want of a second round.
func TestCancelAfterACutShortProvisioningProvisionsAgain(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1"), nil)
	applies := 0
	// The first ask times out after a minute of workflow time; the cancel
	// arrives meanwhile, so provisioning stops after that round.
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(context.Context, []wire.Job) (wire.NodeReport, error) {
			applies++
			return wire.NodeReport{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil)
		}).After(time.Minute).Once()
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(context.Context, []wire.Job) (wire.NodeReport, error) { applies++; return wire.NodeReport{}, nil })
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), mock.Anything, mock.Anything, mock.Anything).Return(true, nil)
	env.OnActivity(node.CancelRun, mock.Anything, mock.Anything).Return(false, nil)
	key := runkey.Manual(jobID, "8")
	signalAt(env, 0, Change{TaskID: 5, Action: wire.ActionUpdate})
	signalAt(env, 30*time.Second, Change{TaskID: 6, Action: wire.ActionCancel, RunKey: key})
	env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: 2 * time.Minute, IdleTimeout: 5 * time.Minute})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if applies != 2 {
		t.Errorf("ApplyJobs ran %d times, want the cut-short round resumed by the cancel's batch (2)", applies)
	}
}

// Backfill requests queued together each run (they name other slots, or
// the same slot after another fix) and never take the place of a run-now
// queued with them; a cancel of one goes after it.
func TestBatchKeepsEachBackfill(t *testing.T) {
	slot := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	b1, b2 := runkey.Backfill(jobID, slot, "20"), runkey.Backfill(jobID, slot.Add(-time.Hour), "22")
	var b batch
	for _, c := range []Change{
		{TaskID: 20, Action: wire.ActionRunNow, RunKey: b1},
		{TaskID: 21, Action: wire.ActionRunNow},
		{TaskID: 22, Action: wire.ActionRunNow, RunKey: b2},
		{TaskID: 23, Action: wire.ActionCancel, RunKey: b1},
	} {
		b.add(c)
	}
	want := []keyedRun{{Req: wire.RunNowRequest{Request: "20", RunKey: b1}}, {Req: wire.RunNowRequest{Request: "22", RunKey: b2}}}
	if !reflect.DeepEqual(b.keyed, want) || b.runNow != "21" || !b.provision {
		t.Fatalf("keyed %+v runNow %q provision %v: want both backfills and the run-now", b.keyed, b.runNow, b.provision)
	}
	if first, after := b.cancelsAround(jobID); len(first) != 0 || !reflect.DeepEqual(after, []string{b1}) {
		t.Fatalf("first %q after %q: a backfill's cancel goes after it", first, after)
	}
}

// A retry goes to the nodes under the request id of its slot and attempt
// (the same for every delivery), and only while the job is enabled and at
// the version it was queued at; a backfill goes whatever the job's state.
func TestSendKeyed(t *testing.T) {
	slot := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	retry := keyedOf(Change{TaskID: 30, Action: wire.ActionRunNow, Version: 4, RunKey: runkey.Retry(jobID, slot, 2)})
	if k, _ := runkey.Parse(retry.Req.RunKey); !retry.Retry || retry.Req.Request != k.RequestID() || retry.Version != 4 {
		t.Fatalf("keyedOf(retry) = %+v", retry)
	}
	backfill := keyedOf(Change{TaskID: 31, Action: wire.ActionRunNow, Version: 4, RunKey: runkey.Backfill(jobID, slot, "31")})
	plan := func(enabled bool, version int64) JobPlan {
		return JobPlan{Exists: true, Version: version, Job: wire.Job{Enabled: enabled}}
	}
	for _, tt := range []struct {
		name string
		r    keyedRun
		plan JobPlan
		want bool
	}{
		{"retry at its version", retry, plan(true, 4), true},
		{"retry after a change", retry, plan(true, 5), false},
		{"retry of a disabled job", retry, plan(false, 4), false},
		{"retry of a deleting job", retry, JobPlan{Exists: true, Deleting: true, Version: 4, Job: wire.Job{Enabled: true}}, false},
		{"backfill of a disabled, changed job", backfill, plan(false, 9), true},
	} {
		if got := sendKeyed(tt.r, tt.plan); got != tt.want {
			t.Errorf("%s: sendKeyed = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A retry's task waits for its delay while later tasks of the job go out,
// so it may come with a lower task id than the last handled: it is not a
// redelivery for that. Any other change with such an id is.
func TestAcceptTakesARetryOutOfOrder(t *testing.T) {
	in := JobInput{LastTaskID: 40}
	retry := Change{TaskID: 35, Action: wire.ActionRunNow, Version: 2, RunKey: runkey.Retry(jobID, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), 2)}
	if ok := in.accept(retry); !ok || in.LastTaskID != 40 {
		t.Errorf("a delayed retry after task 40: accepted %v, last %d; want accepted, last 40", ok, in.LastTaskID)
	}
	for _, c := range []Change{
		{TaskID: 36, Action: wire.ActionRunNow},
		{TaskID: 37, Action: wire.ActionRunNow, RunKey: runkey.Backfill(jobID, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC), "37")},
		{TaskID: 38, Action: wire.ActionDisable},
	} {
		if in.accept(c) {
			t.Errorf("task %d (%s) below the last handled was accepted", c.TaskID, c.Action)
		}
	}
	if !in.accept(Change{TaskID: 41, Action: wire.ActionDisable}) || in.LastTaskID != 41 {
		t.Errorf("a new task: last %d", in.LastTaskID)
	}
}
