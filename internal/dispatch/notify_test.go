package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/workflows"
)

// jobs creates jobs through the store, as the API does, so each queues
// its create task with the store's notification.
type jobs struct {
	t       *testing.T
	st      *store.Store
	tenant  string
	webroot string
}

func newJobs(t *testing.T, st *store.Store) *jobs {
	t.Helper()
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	must(t, err)
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", ShardID: sh.ID, LinuxUser: "acme", LinuxGroup: "acme"})
	must(t, err)
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/acme/public")
	must(t, err)
	return &jobs{t: t, st: st, tenant: tn.ID, webroot: wr.ID}
}

// create queues a job's create task and returns the job's id.
func (j *jobs) create() string {
	j.t.Helper()
	job, _, err := j.st.CreateJob(context.Background(), j.tenant, store.JobFields{WebrootID: j.webroot,
		Schedule: "* * * * *", Timezone: "UTC", Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64}, nil)
	must(j.t, err)
	return job.ID
}

// update queues an update task of job id.
func (j *jobs) update(id string, n int) {
	j.t.Helper()
	_, err := j.st.UpdateJob(context.Background(), id, 0, func(f store.JobFields) (store.JobFields, error) {
		f.Command = fmt.Sprintf("echo %d", n)
		return f, nil
	})
	must(j.t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// signals is a fake Temporal that reports every accepted signal on a
// channel; block, if set, holds a job's signal until it returns.
type signals struct {
	fakeTemporal
	ch    chan workflows.Change
	block func(ctx context.Context, workflowID string) error
}

func newSignals() *signals { return &signals{ch: make(chan workflows.Change, 1000)} }

func (s *signals) SignalWithStartWorkflow(ctx context.Context, workflowID, name string, arg any,
	o client.StartWorkflowOptions, w any, args ...any) (client.WorkflowRun, error) {
	if s.block != nil {
		if err := s.block(ctx, workflowID); err != nil {
			return nil, err
		}
	}
	r, err := s.fakeTemporal.SignalWithStartWorkflow(ctx, workflowID, name, arg, o, w, args...)
	s.ch <- arg.(workflows.Change)
	return r, err
}

// next waits for the next signal; a missing one fails the test instead of
// hanging it (a guard, not a measurement).
func (s *signals) next(t *testing.T) workflows.Change {
	t.Helper()
	select {
	case c := <-s.ch:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("no signal")
		return workflows.Change{}
	}
}

// start runs d until the test ends, and checks that Run returns once
// its context ends (everything stopped).
func start(t *testing.T, d *Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

// holdFirst is a BeforeClaim hook that refuses the first n passes and
// reports each pass's number on passes.
func holdFirst(n int64, passes chan<- int64) *TestHooks {
	var calls atomic.Int64
	return &TestHooks{BeforeClaim: func(context.Context) error {
		i := calls.Add(1)
		select {
		case passes <- i:
		default:
		}
		if i <= n {
			return errors.New("held by the test")
		}
		return nil
	}}
}

func waitPass(t *testing.T, passes <-chan int64, want int64) {
	t.Helper()
	for {
		select {
		case i := <-passes:
			if i >= want {
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("pass %d never came", want)
		}
	}
}

// With both polls an hour away, a task queued through the store is
// dispatched: only its notification can have woken the dispatcher. The
// first two passes (the one Run starts with, and the one the listener asks
// for once it listens, for what was queued before) are refused, and the
// job is created only after the second, so neither can have taken it.
func TestNotificationWakesTheDispatcher(t *testing.T) {
	st := pgtest.New(t)
	js := newJobs(t, st)
	f := newSignals()
	passes := make(chan int64, 100)
	start(t, &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: time.Hour, DeafPoll: time.Hour, Hooks: holdFirst(2, passes)})
	waitPass(t, passes, 2)

	id := js.create()
	if c := f.next(t); c.Action != wire.ActionCreate {
		t.Fatalf("signalled %+v, want job %s's create", c, id)
	}
	waitMarked(t, st)
}

// The listener's session is killed; the dispatcher connects a new one,
// and a task queued after that is dispatched with both polls an hour
// away.
func TestListenerReconnectsAfterItsBackendIsKilled(t *testing.T) {
	st := pgtest.New(t)
	js := newJobs(t, st)
	f := newSignals()
	passes := make(chan int64, 100)
	start(t, &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: time.Hour, DeafPoll: time.Hour, Hooks: holdFirst(2, passes)})
	waitPass(t, passes, 2)
	js.create()
	f.next(t)

	first := listenerPID(t, st, 0)
	var killed bool
	if err := st.Pool().QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, first).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener's backend %d: %v %v", first, killed, err)
	}
	second := listenerPID(t, st, first)
	js.create()
	if c := f.next(t); c.Action != wire.ActionCreate {
		t.Fatalf("signalled %+v after the reconnect, want a create", c)
	}
	t.Logf("listener backend %d killed, %d listening", first, second)
}

// listenerPID waits for the dispatcher's listening session other than
// not, one whose LISTEN has completed, and returns its backend's pid.
func listenerPID(t *testing.T, st *store.Store, not uint32) uint32 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var pid uint32
		err := st.Pool().QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND pid <> $2
			  AND state = 'idle' AND query ILIKE 'listen%'`, store.OutboxListenerName, not).Scan(&pid)
		if err == nil {
			return pid
		}
	}
	t.Fatal("no listening session")
	return 0
}

// Two replicas, both listening, both polls an hour away: tasks queued
// while they run (new jobs and updates of them, so one job's tasks queue
// behind one in flight) are each signalled once, in job order. Nothing
// but notifications and finished sends drives them, so this also shows
// that a job's next task is taken up when its previous one is marked.
func TestTwoListeningReplicasSendEachTaskOnce(t *testing.T) {
	st := pgtest.New(t)
	js := newJobs(t, st)
	f := newSignals()
	for range 2 {
		start(t, &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: time.Hour, DeafPoll: time.Hour, Parallel: 3})
	}
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = js.create()
	}
	const updates = 4
	for n := 1; n <= updates; n++ {
		for _, id := range ids {
			js.update(id, n)
		}
	}
	total := len(ids) * (1 + updates)
	seen := map[int64]int{}
	for range total {
		seen[f.next(t).TaskID]++
	}
	waitMarked(t, st)
	for id, n := range seen {
		if n != 1 {
			t.Errorf("task %d signalled %d times", id, n)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(seen) != total || len(f.sent) != total {
		t.Errorf("%d signals of %d tasks, want %d of %d", len(f.sent), len(seen), total, total)
	}
	checkOrder(t, &f.fakeTemporal)
}

// While job A's first signal hangs in Temporal, job B's three tasks are
// all signalled (sends run in parallel) and A's second task is not (its
// job's order holds); once A's first returns, A's second follows.
func TestOneJobWaitsInOrderWhileAnotherGoes(t *testing.T) {
	st := pgtest.New(t)
	js := newJobs(t, st)
	a, b := js.create(), js.create()
	js.update(a, 1)
	js.update(b, 1)
	js.update(b, 2)
	release := make(chan struct{})
	var once sync.Once
	hung := make(chan struct{})
	f := newSignals()
	f.block = func(ctx context.Context, wf string) error {
		if wf != workflows.JobWorkflowID(a) {
			return nil
		}
		first := false
		once.Do(func() { first = true; close(hung) })
		if first {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	start(t, &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: time.Hour, DeafPoll: time.Hour, Parallel: 2})
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("job A's first task was never sent")
	}
	for range 3 {
		f.next(t) // job B's create and two updates, sent beside A's hanging one
	}
	f.mu.Lock()
	for _, wf := range f.jobs {
		if wf != workflows.JobWorkflowID(b) {
			t.Errorf("%s signalled while job A's first signal hung", wf)
		}
	}
	f.mu.Unlock()
	close(release)
	f.next(t)
	f.next(t)
	waitMarked(t, st)
	f.mu.Lock()
	defer f.mu.Unlock()
	checkOrder(t, &f.fakeTemporal)
}

// waitMarked waits until no task is pending: a signal is seen before its
// row is marked.
func waitMarked(t *testing.T, st *store.Store) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); pending(t, st) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks still pending", pending(t, st))
		}
	}
}
