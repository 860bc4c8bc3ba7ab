package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// provisionCounter mocks a healthy one-node provisioning and counts the
// ApplyJobs calls, the side effect a redelivery must not repeat.
func provisionCounter(env *testsuite.TestWorkflowEnvironment) *int {
	applies := 0
	env.OnActivity(core.LoadJob, mock.Anything, jobID).Return(plan(true, false, "node1"), nil)
	env.OnActivity(node.ApplyJobs, mock.Anything, mock.Anything).Return(
		func(context.Context, []wire.Job) (wire.NodeReport, error) { applies++; return wire.NodeReport{}, nil })
	env.OnActivity(core.SetJobStatus, mock.Anything, jobID, int64(7), wire.StatusActive, "", 1).Return(true, nil)
	return &applies
}

// signalAt delivers changes at a (test-environment) delay after start.
func signalAt(env *testsuite.TestWorkflowEnvironment, after time.Duration, changes ...Change) {
	env.RegisterDelayedCallback(func() {
		for _, c := range changes {
			env.SignalWorkflow(SignalChange, c)
		}
	}, after)
}

func TestJobWorkflowIgnoresRedeliveredChange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deliver [][]Change // each inner list arrives together, a minute apart
		applies int
	}{
		{"same change in a later batch", [][]Change{{{TaskID: 5, Action: wire.ActionCreate}}, {{TaskID: 5, Action: wire.ActionCreate}}}, 1},
		{"older change after a newer one", [][]Change{{{TaskID: 6, Action: wire.ActionUpdate}}, {{TaskID: 5, Action: wire.ActionCreate}}}, 1},
		{"redelivery queued with a new change", [][]Change{{{TaskID: 5, Action: wire.ActionCreate}}, {{TaskID: 5, Action: wire.ActionCreate}, {TaskID: 6, Action: wire.ActionUpdate}}}, 2},
		{"new change is applied", [][]Change{{{TaskID: 5, Action: wire.ActionCreate}}, {{TaskID: 6, Action: wire.ActionUpdate}}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			applies := provisionCounter(env)
			for i, cs := range tc.deliver {
				signalAt(env, time.Duration(i)*time.Minute, cs...)
			}
			env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: time.Minute, IdleTimeout: 5 * time.Minute})
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if *applies != tc.applies {
				t.Errorf("ApplyJobs ran %d times, want %d", *applies, tc.applies)
			}
		})
	}
}

func TestJobWorkflowRunNowRedeliveredRunsOnce(t *testing.T) {
	env := newEnv(t)
	provisionCounter(env)
	runs := 0
	env.OnActivity(node.RunNow, mock.Anything, wire.RunNowRequest{Unit: "cron-acme-" + jobID, Request: "8"}).Return(
		func(context.Context, wire.RunNowRequest) error { runs++; return nil })
	signalAt(env, 0, Change{TaskID: 8, Action: wire.ActionRunNow})
	signalAt(env, time.Minute, Change{TaskID: 8, Action: wire.ActionRunNow})
	env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: time.Minute, IdleTimeout: 5 * time.Minute})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if runs != 1 {
		t.Errorf("RunNow ran %d times, want 1", runs)
	}
}

// TestJobWorkflowRemembersAcrossContinueAsNew: the next run gets the
// highest handled task id and ignores a redelivery of it.
func TestJobWorkflowRemembersAcrossContinueAsNew(t *testing.T) {
	env := newEnv(t)
	provisionCounter(env)
	signalAt(env, 0, Change{TaskID: 5, Action: wire.ActionCreate})
	signalAt(env, time.Minute, Change{TaskID: 6, Action: wire.ActionUpdate})
	env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: time.Minute, IdleTimeout: 5 * time.Minute, MaxBatches: 1})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	var next JobInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.LastTaskID != 6 {
		t.Fatalf("continue-as-new input carries LastTaskID %d, want 6", next.LastTaskID)
	}

	env = newEnv(t)
	applies := provisionCounter(env)
	signalAt(env, 0, Change{TaskID: 6, Action: wire.ActionUpdate})
	signalAt(env, time.Minute, Change{TaskID: 7, Action: wire.ActionUpdate})
	env.ExecuteWorkflow(JobWorkflow, next)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if *applies != 1 {
		t.Errorf("ApplyJobs ran %d times after continue-as-new, want 1 (task 7 only)", *applies)
	}
}

// A retry that comes after a later task of its job (it waited out its
// delay) is still sent, under its slot-and-attempt request id; one queued
// at a version the job has left (changed meanwhile) is not.
func TestJobWorkflowSendsARetryOutOfOrder(t *testing.T) {
	slot := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	current, stale := runkey.Retry(jobID, slot, 2), runkey.Retry(jobID, slot.Add(time.Hour), 2)
	k, _ := runkey.Parse(current)
	env := newEnv(t)
	provisionCounter(env) // the job is at version 7
	sent := map[string]int{}
	env.OnActivity(node.RunNow, mock.Anything, mock.Anything).Return(
		func(_ context.Context, r wire.RunNowRequest) error { sent[r.Request+" "+r.RunKey]++; return nil })
	signalAt(env, 0, Change{TaskID: 9, Action: wire.ActionRunNow})
	signalAt(env, time.Minute, Change{TaskID: 5, Action: wire.ActionRunNow, Version: 7, RunKey: current},
		Change{TaskID: 6, Action: wire.ActionRunNow, Version: 6, RunKey: stale})
	env.ExecuteWorkflow(JobWorkflow, JobInput{JobID: jobID, NodeTimeout: time.Minute, IdleTimeout: 5 * time.Minute})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"9 ": 1, k.RequestID() + " " + current: 1}
	if len(sent) != len(want) || sent["9 "] != 1 || sent[k.RequestID()+" "+current] != 1 {
		t.Errorf("RunNow sent %v, want %v (the stale retry not at all)", sent, want)
	}
}
