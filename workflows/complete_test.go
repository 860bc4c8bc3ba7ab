package workflows

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/hostcron/hostcron/internal/wire"
)

// queueUnits is a unit manager whose applies and deletes are queued
// (QueuedUnits): it keeps each change's answer function for the test.
type queueUnits struct {
	fakeUnits
	mu      sync.Mutex
	refuse  error // ApplyThen and DeleteThen refuse the change with it
	then    func(wire.NodeReport, error)
	wait    context.Context
	jobs    []wire.Job
	deleted []string
}

func (q *queueUnits) ApplyThen(ctx context.Context, jobs []wire.Job, then func(wire.NodeReport, error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.refuse != nil {
		return q.refuse
	}
	q.wait, q.jobs, q.then = ctx, jobs, then
	return nil
}

func (q *queueUnits) DeleteThen(ctx context.Context, names []string, _ int64, then func(wire.NodeReport, error)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.refuse != nil {
		return q.refuse
	}
	q.wait, q.deleted, q.then = ctx, names, then
	return nil
}

func (q *queueUnits) answer(t *testing.T, rep wire.NodeReport, err error) {
	t.Helper()
	q.mu.Lock()
	then := q.then
	q.mu.Unlock()
	if then == nil {
		t.Fatal("nothing was queued")
	}
	then(rep, err)
}

// completions records the activity completions.
type completions struct {
	mu   sync.Mutex
	done []client.CompleteActivityOptions
}

func (c *completions) CompleteActivityWithOptions(ctx context.Context, opts client.CompleteActivityOptions) error {
	if err := ctx.Err(); err != nil {
		return err // as the client: nothing is sent
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = append(c.done, opts)
	return nil
}

func (c *completions) all() []client.CompleteActivityOptions {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.done)
}

// runActivity runs fn (a method of a) as the activity name in Temporal's
// test environment, and returns the activity's info as fn saw it.
func runActivity[A any](a *NodeActivities, name string, fn func(context.Context, A) (wire.NodeReport, error), arg A) (activity.Info, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	var info activity.Info
	env.RegisterActivityWithOptions(func(ctx context.Context, arg A) (wire.NodeReport, error) {
		info = activity.GetInfo(ctx)
		return fn(ctx, arg)
	}, activity.RegisterOptions{Name: name})
	_, err := env.ExecuteActivity(name, arg)
	return info, err
}

// With a Completer, ApplyJobs queues its change and returns
// ErrResultPending; the queue's answer completes the activity with the
// result the synchronous activity returns, under the activity's own
// serialization context (the payload signature is bound to it).
func TestApplyJobsCompletesWhenTheQueueAnswers(t *testing.T) {
	refusedJob := tenantJob
	refusedJob.ID, refusedJob.User = "1b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10", "root"
	rep := wire.NodeReport{Written: []string{"cron-acme-x.timer"}, Reloads: 1}
	for name, tc := range map[string]struct {
		jobs    []wire.Job
		err     error
		wantErr func(error) bool
	}{
		"applied":            {jobs: []wire.Job{tenantJob}, wantErr: func(err error) bool { return err == nil }},
		"failed on the node": {jobs: []wire.Job{tenantJob}, err: errors.New("daemon-reload: timed out"), wantErr: func(err error) bool { return err != nil && err.Error() == "daemon-reload: timed out" }},
		"a job refused by admission": {jobs: []wire.Job{tenantJob, refusedJob}, wantErr: func(err error) bool {
			var app *temporal.ApplicationError
			return errors.As(err, &app) && app.NonRetryable() && app.Type() == "ApplyFailed"
		}},
	} {
		t.Run(name, func(t *testing.T) {
			u, done := &queueUnits{}, &completions{}
			a := &NodeActivities{Units: u, Admission: admitAll, Completer: done}
			info, err := runActivity(a, "ApplyJobs", a.ApplyJobs, tc.jobs)
			if !errors.Is(err, activity.ErrResultPending) {
				t.Fatalf("ApplyJobs returned %v, want ErrResultPending", err)
			}
			if !slices.EqualFunc(u.jobs, []wire.Job{tenantJob}, func(a, b wire.Job) bool { return a.ID == b.ID }) {
				t.Fatalf("queued %v, want the admitted job only", u.jobs)
			}
			if err := u.wait.Err(); err != nil {
				t.Fatalf("the queued change's wait ended with the activity's call: %v", err)
			}
			if dl, ok := u.wait.Deadline(); !ok || !dl.After(time.Now()) {
				t.Errorf("the queued change waits until %v, want the activity's deadline", dl)
			}
			if len(done.all()) != 0 {
				t.Fatal("completed before the queue answered")
			}
			u.answer(t, rep, tc.err)
			waitUntil(t, func() bool { return len(done.all()) == 1 })
			got := done.all()[0]
			if !tc.wantErr(got.Err) {
				t.Errorf("completed with error %v", got.Err)
			}
			if got.Err == nil {
				if r, ok := got.Result.(wire.NodeReport); !ok || !slices.Equal(r.Written, rep.Written) {
					t.Errorf("completed with result %#v, want the node's report", got.Result)
				}
			} else if got.Result != nil {
				t.Errorf("a failed completion carries a result: %#v", got.Result)
			}
			want := client.CompleteActivityOptions{TaskToken: info.TaskToken, WorkflowID: info.WorkflowExecution.ID,
				WorkflowType: info.WorkflowType.Name, ActivityType: "ApplyJobs", TaskQueue: info.TaskQueue}
			got.Result, got.Err = nil, nil
			if !slices.Equal(got.TaskToken, want.TaskToken) || got.WorkflowID != want.WorkflowID || got.WorkflowType != want.WorkflowType ||
				got.ActivityType != want.ActivityType || got.TaskQueue != want.TaskQueue || got.Namespace != "" {
				t.Errorf("completion %+v, want the activity's own context %+v", got, want)
			}
		})
	}
}

// A change the queue refuses at once (an invalid request, a context
// already ended) is the activity's synchronous answer; nothing is
// completed later.
func TestQueuedActivityRefusedAtOnce(t *testing.T) {
	refusal := errors.New(`remove: "x" is not a cron unit name`)
	u, done := &queueUnits{refuse: refusal}, &completions{}
	a := &NodeActivities{Units: u, Admission: admitAll, Completer: done}
	remove := func(ctx context.Context, names []string) (wire.NodeReport, error) {
		return a.RemoveUnits(ctx, names, 3)
	}
	if _, err := runActivity(a, "RemoveUnits", remove, []string{"cron-acme-" + tenantJob.ID}); err == nil || errors.Is(err, activity.ErrResultPending) {
		t.Fatalf("RemoveUnits returned %v, want the refusal", err)
	}
	if len(done.all()) != 0 {
		t.Errorf("a refused change was completed: %+v", done.all())
	}
	waitUntil(t, func() bool { return a.queuedNow.Load() == 0 }) // counted no more
}

// RemoveUnits completes the same way: its report, or its error.
func TestRemoveUnitsCompletesWhenTheQueueAnswers(t *testing.T) {
	u, done := &queueUnits{}, &completions{}
	a := &NodeActivities{Units: u, Admission: admitAll, Completer: done}
	name := "cron-acme-" + tenantJob.ID
	remove := func(ctx context.Context, names []string) (wire.NodeReport, error) {
		return a.RemoveUnits(ctx, names, 3)
	}
	if _, err := runActivity(a, "RemoveUnits", remove, []string{name}); !errors.Is(err, activity.ErrResultPending) {
		t.Fatalf("RemoveUnits returned %v, want ErrResultPending", err)
	}
	if !slices.Equal(u.deleted, []string{name}) {
		t.Fatalf("queued %v", u.deleted)
	}
	u.answer(t, wire.NodeReport{Removed: []string{name + ".timer"}}, nil)
	waitUntil(t, func() bool { return len(done.all()) == 1 })
	if got := done.all()[0]; got.Err != nil || got.ActivityType != "RemoveUnits" {
		t.Errorf("completion %+v", got)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Past maxQueued changes waiting asynchronously, an activity waits for
// its change itself (holding its slot: the slots' back-pressure).
func TestTooManyQueuedWaitsInTheActivity(t *testing.T) {
	u, done := &queueUnits{}, &completions{}
	a := &NodeActivities{Units: u, Admission: admitAll, Completer: done}
	a.queuedNow.Store(maxQueued)
	if _, err := runActivity(a, "ApplyJobs", a.ApplyJobs, []wire.Job{tenantJob}); err != nil {
		t.Fatalf("ApplyJobs returned %v, want the synchronous answer", err)
	}
	if len(u.applied) != 1 || u.then != nil {
		t.Errorf("applied %v synchronously, queued %v; want the synchronous apply only", u.applied, u.then != nil)
	}
	if got := a.queuedNow.Load(); got != maxQueued {
		t.Errorf("%d counted waiting, want %d (unchanged)", got, maxQueued)
	}
	a.queuedNow.Store(0)
	if _, err := runActivity(a, "ApplyJobs", a.ApplyJobs, []wire.Job{tenantJob}); !errors.Is(err, activity.ErrResultPending) {
		t.Fatalf("ApplyJobs returned %v, want ErrResultPending", err)
	}
	if got := a.queuedNow.Load(); got != 1 {
		t.Errorf("%d counted waiting, want 1", got)
	}
	u.answer(t, wire.NodeReport{}, nil)
	waitUntil(t, func() bool { return a.queuedNow.Load() == 0 })
}
