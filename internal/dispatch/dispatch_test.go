package dispatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/workflows"
)

// fakeTemporal records every accepted signal; fail decides per job
// whether the send fails, and with what.
type fakeTemporal struct {
	mu   sync.Mutex
	sent []workflows.Change
	jobs []string
	fail func(workflowID string) error
}

func (f *fakeTemporal) SignalWithStartWorkflow(_ context.Context, workflowID, _ string, arg any,
	_ client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	time.Sleep(time.Millisecond) // let two dispatchers' passes overlap
	if f.fail != nil {
		if err := f.fail(workflowID); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, arg.(workflows.Change))
	f.jobs = append(f.jobs, workflowID)
	return nil, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// queue writes n tasks for each of jobs, interleaved, and returns the job ids.
func queue(t *testing.T, st *store.Store, jobs, n int) []string {
	t.Helper()
	ids := make([]string, jobs)
	for j := range ids {
		ids[j] = fmt.Sprintf("00000000-0000-4000-8000-%012d", j+1)
	}
	for v := 1; v <= n; v++ {
		for _, id := range ids {
			if _, err := st.Pool().Exec(context.Background(),
				`INSERT INTO cron_job_tasks (cron_job_id, action, version) VALUES ($1, $2, $3)`, id, wire.ActionUpdate, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ids
}

func pending(t *testing.T, st *store.Store) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM cron_job_tasks WHERE dispatched_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runUntil runs dispatchers until done() or a deadline.
func runUntil(t *testing.T, done func() bool, ds ...*Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(ctx) }()
	}
	deadline := time.Now().Add(20 * time.Second)
	for !done() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
}

// checkOrder fails if a job's tasks were not signalled in id order.
func checkOrder(t *testing.T, f *fakeTemporal) {
	t.Helper()
	last := map[string]int64{}
	for i, c := range f.sent {
		if c.TaskID <= last[f.jobs[i]] {
			t.Errorf("%s: task %d signalled after task %d", f.jobs[i], c.TaskID, last[f.jobs[i]])
		}
		last[f.jobs[i]] = c.TaskID
	}
}

func TestTwoDispatchersSendEveryTaskOnceInJobOrder(t *testing.T) {
	st := pgtest.New(t)
	queue(t, st, 20, 5)
	f := &fakeTemporal{}
	a := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 5 * time.Millisecond, Parallel: 7}
	b := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 5 * time.Millisecond, Parallel: 7}
	runUntil(t, func() bool { return pending(t, st) == 0 }, a, b)

	if n := pending(t, st); n != 0 {
		t.Fatalf("%d tasks still pending", n)
	}
	seen := map[int64]int{}
	for _, c := range f.sent {
		seen[c.TaskID]++
	}
	if len(seen) != 100 || len(f.sent) != 100 {
		t.Errorf("signalled %d times for %d distinct tasks, want 100 each", len(f.sent), len(seen))
	}
	checkOrder(t, f)
}

func TestPoisonedTaskDoesNotBlockOthers(t *testing.T) {
	st := pgtest.New(t)
	ids := queue(t, st, 5, 2)
	poisoned := workflows.JobWorkflowID(ids[0])
	f := &fakeTemporal{fail: func(wf string) error {
		if wf == poisoned {
			return serviceerror.NewInvalidArgument("refused")
		}
		return nil
	}}
	d := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 5 * time.Millisecond}
	runUntil(t, func() bool { return pending(t, st) == 2 }, d)

	if n := pending(t, st); n != 2 {
		t.Fatalf("%d tasks pending, want the poisoned job's 2", n)
	}
	for _, wf := range f.jobs {
		if wf == poisoned {
			t.Fatal("the poisoned job's task was marked sent")
		}
	}
	var attempts int
	var lastErr string
	if err := st.Pool().QueryRow(context.Background(), `SELECT attempts, last_error FROM cron_job_tasks
		WHERE cron_job_id = $1 ORDER BY id LIMIT 1`, ids[0]).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts < 1 || lastErr == "" {
		t.Errorf("poisoned head task: attempts %d, last_error %q; want a counted failure", attempts, lastErr)
	}
	checkOrder(t, f)
}

func TestOutageDoesNotCountAgainstTasks(t *testing.T) {
	st := pgtest.New(t)
	queue(t, st, 3, 1)
	f := &fakeTemporal{fail: func(string) error { return serviceerror.NewUnavailable("connection refused") }}
	d := &Dispatcher{Store: st, Temporal: f, Log: quiet()}
	if _, err := d.Pass(context.Background()); err == nil {
		t.Fatal("a pass against an unreachable Temporal reported no error")
	}
	var attempts, claimed int
	if err := st.Pool().QueryRow(context.Background(), `SELECT coalesce(sum(attempts), 0),
		count(*) FILTER (WHERE claimed_until IS NOT NULL) FROM cron_job_tasks`).Scan(&attempts, &claimed); err != nil {
		t.Fatal(err)
	}
	if attempts != 0 || claimed != 0 {
		t.Errorf("after an outage: %d attempts counted, %d tasks still claimed; want 0 and 0", attempts, claimed)
	}
}

func TestLeaseExpiryResendsAndPruneRemovesDispatched(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	queue(t, st, 1, 1)
	first, err := st.ClaimTasks(ctx, 10, 50*time.Millisecond)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %v %v", first, err)
	}
	if again, _ := st.ClaimTasks(ctx, 10, time.Minute); len(again) != 0 {
		t.Fatalf("a leased task was claimed twice: %v", again)
	}
	time.Sleep(100 * time.Millisecond) // the first claimer died
	again, err := st.ClaimTasks(ctx, 10, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != first[0].ID {
		t.Fatalf("after the lease ran out: %v %v", again, err)
	}
	if err := st.MarkDispatched(ctx, again[0].ID); err != nil {
		t.Fatal(err)
	}
	if n, err := st.PruneDispatched(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("pruned a fresh task: %d %v", n, err)
	}
	if n, err := st.PruneDispatched(ctx, time.Now().Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if _, ok, err := st.OldestPendingTask(ctx); ok || err != nil {
		t.Errorf("oldest pending after everything went: %v %v", ok, err)
	}
}

// slowTemporal accepts every signal, each after delay: Temporal under load.
type slowTemporal struct {
	fakeTemporal
	delay time.Duration
}

func (s *slowTemporal) SignalWithStartWorkflow(ctx context.Context, workflowID, name string, arg any,
	o client.StartWorkflowOptions, w any, args ...any) (client.WorkflowRun, error) {
	time.Sleep(s.delay)
	return s.fakeTemporal.SignalWithStartWorkflow(ctx, workflowID, name, arg, o, w, args...)
}

// Two dispatchers whose sends are slow (each accepted after a fifth of the
// lease) must not send a task whose lease ran out: another dispatcher
// may have claimed and sent it meanwhile, and a run_now sent twice runs
// twice once the job's workflow has idled out between the two. A send
// starts as soon as its task is claimed and is bounded by SendTimeout, so
// none outlasts its lease.
func TestSlowSendsDoNotSendPastTheirLease(t *testing.T) {
	st := pgtest.New(t)
	queue(t, st, 12, 1)
	f := &slowTemporal{delay: 60 * time.Millisecond}
	mk := func() *Dispatcher {
		return &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 10 * time.Millisecond,
			Lease: 300 * time.Millisecond, SendTimeout: 100 * time.Millisecond}
	}
	runUntil(t, func() bool { return pending(t, st) == 0 }, mk(), mk())
	if n := pending(t, st); n != 0 {
		t.Fatalf("%d tasks still pending", n)
	}
	seen := map[int64]int{}
	for _, c := range f.sent {
		seen[c.TaskID]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("task %d signalled %d times", id, n)
		}
	}
}

// A replica dies between Temporal accepting a signal and the row being
// marked (the AfterSignal hook holds that one send there until it is
// stopped): the other jobs' tasks go meanwhile (from either replica: the
// stuck send holds one of the first one's send slots, not its
// dispatcher), the stuck job's later task is held back (per-job order),
// and the other replica sends the stuck task again once its lease ran out; the workflow's task-id memory
// makes that second signal a no-op (workflows/dedup_test.go).
func TestReplicaKilledBetweenSignalAndMark(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	stuck := queue(t, st, 1, 2)[0] // the stuck job's tasks 1 and 2
	f := &fakeTemporal{}
	hit := make(chan store.Task, 1)
	var armed atomic.Bool
	armed.Store(true)
	killed := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 5 * time.Millisecond,
		Lease: 600 * time.Millisecond, Hooks: &TestHooks{AfterSignal: func(ctx context.Context, task store.Task) error {
			if !armed.CompareAndSwap(true, false) {
				return nil // its other sends, in parallel, go on until it is stopped
			}
			hit <- task
			<-ctx.Done() // the replica dies here
			return ctx.Err()
		}}}
	kctx, kill := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); killed.Run(kctx) }()
	var first store.Task
	select {
	case first = <-hit:
	case <-time.After(5 * time.Second):
		t.Fatal("the first replica sent nothing")
	}

	// Other jobs' changes, made while the stuck task holds its lease.
	var others []int64
	for i := 1; i <= 3; i++ {
		var id int64
		if err := st.Pool().QueryRow(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version) VALUES ($1, $2, 1) RETURNING id`,
			fmt.Sprintf("00000000-0000-4000-9000-%012d", i), wire.ActionUpdate).Scan(&id); err != nil {
			t.Fatal(err)
		}
		others = append(others, id)
	}
	survivor := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Poll: 5 * time.Millisecond, Lease: 600 * time.Millisecond}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go survivor.Run(sctx)
	othersSent := func() bool {
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM cron_job_tasks WHERE id = ANY($1) AND dispatched_at IS NOT NULL`, others).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(others)
	}
	for deadline := time.Now().Add(400 * time.Millisecond); !othersSent(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("other jobs' tasks waited for the stuck task")
		}
	}
	f.mu.Lock()
	for i, c := range f.sent {
		if f.jobs[i] == workflows.JobWorkflowID(stuck) && c.TaskID != first.ID {
			t.Errorf("task %d of the stuck job was sent before the stuck task %d was marked", c.TaskID, first.ID)
		}
	}
	f.mu.Unlock()

	kill()
	<-done
	deadline := time.Now().Add(10 * time.Second)
	for pending(t, st) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks pending after the first replica died", pending(t, st))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	var signalled []int64
	for i, c := range f.sent {
		if f.jobs[i] == workflows.JobWorkflowID(stuck) {
			signalled = append(signalled, c.TaskID)
		}
	}
	if len(signalled) != 3 || signalled[0] != first.ID || signalled[1] != first.ID || signalled[2] <= first.ID {
		t.Errorf("stuck job signalled %v; want task %d twice (sent, not marked, sent again), then the next", signalled, first.ID)
	}
	checkOrder(t, &fakeTemporal{sent: dedupe(f.sent), jobs: dedupeJobs(f)})
}

// dedupe drops repeated task ids, as the job workflow does.
func dedupe(sent []workflows.Change) []workflows.Change {
	seen := map[int64]bool{}
	var out []workflows.Change
	for _, c := range sent {
		if !seen[c.TaskID] {
			seen[c.TaskID] = true
			out = append(out, c)
		}
	}
	return out
}

func dedupeJobs(f *fakeTemporal) []string {
	seen := map[int64]bool{}
	var out []string
	for i, c := range f.sent {
		if !seen[c.TaskID] {
			seen[c.TaskID] = true
			out = append(out, f.jobs[i])
		}
	}
	return out
}

// TestBeforeClaimHoldsTheOutbox: while the BeforeClaim hook refuses, a
// pass claims and sends nothing and leaves every task pending and
// unclaimed; once it lets go, every task goes.
func TestBeforeClaimHoldsTheOutbox(t *testing.T) {
	st := pgtest.New(t)
	queue(t, st, 3, 2)
	f := &fakeTemporal{}
	hold := true
	d := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Hooks: &TestHooks{BeforeClaim: func(context.Context) error {
		if hold {
			return fmt.Errorf("held")
		}
		return nil
	}}}
	sent, err := d.Pass(context.Background())
	if err == nil || sent != 0 || len(f.sent) != 0 {
		t.Fatalf("held pass: sent %d (%d signals), err %v; want nothing sent and an error", sent, len(f.sent), err)
	}
	var claimed int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM cron_job_tasks WHERE claimed_until IS NOT NULL`).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if n := pending(t, st); n != 6 || claimed != 0 {
		t.Fatalf("after a held pass: %d pending, %d claimed; want 6, 0", n, claimed)
	}
	hold = false
	runUntil(t, func() bool { return pending(t, st) == 0 }, d)
	if len(f.sent) != 6 {
		t.Errorf("after the release: %d signals, want 6", len(f.sent))
	}
	checkOrder(t, f)
}
