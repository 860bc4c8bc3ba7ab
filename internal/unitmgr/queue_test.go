package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func unit(id string) string { return job(id).UnitName() }

func apply(jobs ...wire.Job) Request { return Request{Op: OpApply, Jobs: jobs} }
func del(version int64, ids ...string) Request {
	r := Request{Op: OpRemove, Version: version}
	for _, id := range ids {
		r.Names = append(r.Names, unit(id))
	}
	return r
}

func TestBatchLen(t *testing.T) {
	for name, tc := range map[string]struct {
		reqs []Request
		want int
	}{
		"empty queue":                 {nil, 0},
		"lone apply":                  {[]Request{apply(job(idA))}, 1},
		"applies of different jobs":   {[]Request{apply(job(idA)), apply(job(idB)), apply(job(idC))}, 3},
		"two versions of one job":     {[]Request{apply(job(idA)), apply(job(idA, version(2)))}, 1},
		"one version twice (a retry)": {[]Request{apply(job(idA)), apply(job(idA))}, 2},
		"applies and deletes":         {[]Request{apply(job(idA)), del(3, idB), apply(job(idC))}, 3},
		"two deletes of one job":      {[]Request{del(3, idA), del(4, idA)}, 2},
		"apply then delete, same job": {[]Request{apply(job(idB)), apply(job(idA)), del(3, idA), apply(job(idC))}, 2},
		"delete then apply, same job": {[]Request{del(3, idA), apply(job(idA, version(4)))}, 1},
		"reconcile first runs alone":  {[]Request{{Op: OpReconcile}, apply(job(idA))}, 1},
		"reconcile ends the batch":    {[]Request{apply(job(idA)), {Op: OpReconcile}, apply(job(idB))}, 1},
		"operator's removal alone":    {[]Request{{Op: OpRemove, Names: []string{unit(idA)}, Operator: true}, apply(job(idB))}, 1},
		"operator's removal ends it":  {[]Request{apply(job(idB)), {Op: OpRemove, Names: []string{unit(idA)}, Operator: true}}, 1},
	} {
		if got := batchLen(tc.reqs); got != tc.want {
			t.Errorf("%s: batchLen = %d, want %d", name, got, tc.want)
		}
	}
}

func TestMergeBatch(t *testing.T) {
	for name, tc := range map[string]struct {
		reqs []Request
		want Request
	}{
		"one request is itself": {[]Request{del(3, idA)}, del(3, idA)},
		"applies": {[]Request{apply(job(idA)), apply(job(idB), job(idC))},
			apply(job(idA), job(idB), job(idC))},
		"the higher version wins, whatever the order": {
			[]Request{apply(job(idA, version(3))), apply(job(idB)), apply(job(idA, version(2)))},
			apply(job(idA, version(3)), job(idB))},
		"equal versions: the later (a converge's new revision)": {
			[]Request{apply(job(idA, rev(1))), apply(job(idA, rev(2)))},
			apply(job(idA, rev(2)))},
		"applies and deletes, each delete at its version": {
			[]Request{apply(job(idA)), del(5, idB), del(7, idC)},
			Request{Op: OpBatch, Jobs: []wire.Job{job(idA)}, Names: []string{unit(idB), unit(idC)},
				Versions: map[string]int64{unit(idB): 5, unit(idC): 7}}},
		"two deletes of one job: the higher version": {
			[]Request{del(5, idB), del(4, idB), del(9, idB), apply(job(idA))},
			Request{Op: OpBatch, Jobs: []wire.Job{job(idA)}, Names: []string{unit(idB)}, Versions: map[string]int64{unit(idB): 9}}},
		"a delete that does not say its version refuses every version": {
			[]Request{del(5, idB), del(0, idB), del(9, idB)},
			Request{Op: OpBatch, Names: []string{unit(idB)}, Versions: map[string]int64{unit(idB): 0}}},
	} {
		if got := mergeBatch(tc.reqs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, tc.want)
		}
	}
}

func TestSplitResult(t *testing.T) {
	a, b, c := unit(idA), unit(idB), unit(idC)
	full := wire.NodeReport{
		Written: []string{a + ".service", a + ".timer", b + ".timer"}, Specs: []string{a, b},
		Removed: []string{c}, Enabled: []string{a + ".timer"}, Disabled: []string{b + ".timer"},
		Failed: []string{b + ": lock directory: permission denied"}, Reloads: 1,
	}
	reqs := []Request{apply(job(idA)), apply(job(idB, disabled)), del(4, idC)}
	startA := &unitError{a, errors.New("start " + a + ".timer: failed")}
	stopB := &unitError{b, errors.New("stop " + b + ".timer: failed")}
	reload := errors.New("daemon-reload: connection reset")
	for name, tc := range map[string]struct {
		reqs    []Request
		rep     wire.NodeReport
		err     error
		want    []wire.NodeReport
		wantErr []string // "" no error; else a substring
	}{
		"each its own units": {reqs, full, nil, []wire.NodeReport{
			{Written: []string{a + ".service", a + ".timer"}, Specs: []string{a}, Enabled: []string{a + ".timer"}, Reloads: 1},
			{Written: []string{b + ".timer"}, Specs: []string{b}, Disabled: []string{b + ".timer"},
				Failed: []string{b + ": lock directory: permission denied"}, Reloads: 1},
			{Removed: []string{c}, Reloads: 1},
		}, []string{"", "", ""}},
		"a unit's failed step is its caller's alone": {reqs, full, errors.Join(stopB, startA), nil,
			[]string{"start " + a, "stop " + b, ""}},
		"a failed reload is everyone's": {reqs, full, errors.Join(stopB, reload), nil,
			[]string{"daemon-reload", "daemon-reload", "daemon-reload"}},
		"a lone node-wide error (not joined) is everyone's": {reqs, full, reload, nil,
			[]string{"daemon-reload", "daemon-reload", "daemon-reload"}},
		"an older version the batch replaced is kept": {
			[]Request{apply(job(idA, version(2))), apply(job(idA, version(3)))},
			wire.NodeReport{Written: []string{a + ".timer"}, Specs: []string{a}, Reloads: 1}, nil,
			[]wire.NodeReport{{Kept: []string{a}, Reloads: 1}, {Written: []string{a + ".timer"}, Specs: []string{a}, Reloads: 1}},
			[]string{"", ""}},
		"an older version whose newer one a tombstone refused is stale": {
			[]Request{apply(job(idA, version(2))), apply(job(idA, version(3)))},
			wire.NodeReport{Stale: []string{a}}, nil,
			[]wire.NodeReport{{Stale: []string{a}}, {Stale: []string{a}}},
			[]string{"", ""}},
		"two deletes of one job share its entries": {
			[]Request{del(3, idC), del(4, idC)}, wire.NodeReport{Removed: []string{c}, Reloads: 1}, nil,
			[]wire.NodeReport{{Removed: []string{c}, Reloads: 1}, {Removed: []string{c}, Reloads: 1}},
			[]string{"", ""}},
	} {
		got := splitResult(tc.reqs, mergeBatch(tc.reqs), tc.rep, tc.err)
		for i, r := range got {
			if tc.want != nil && !reflect.DeepEqual(r.rep, tc.want[i]) {
				t.Errorf("%s: caller %d report\n got %+v\nwant %+v", name, i, r.rep, tc.want[i])
			}
			switch w := tc.wantErr[i]; {
			case w == "" && r.err != nil:
				t.Errorf("%s: caller %d: unexpected error %v", name, i, r.err)
			case w != "" && (r.err == nil || !strings.Contains(r.err.Error(), w)):
				t.Errorf("%s: caller %d: error %v, want one with %q", name, i, r.err, w)
			}
		}
		// No caller is handed another job's failed step.
		for i, r := range got {
			for _, other := range []*unitError{startA, stopB} {
				if errors.Is(r.err, other) && !slices.Contains(namesOf(tc.reqs[i]), other.unit) {
					t.Errorf("%s: caller %d got %s's error: %v", name, i, other.unit, r.err)
				}
			}
		}
	}
}

func namesOf(r Request) []string {
	out := slices.Clone(r.Names)
	for _, j := range r.Jobs {
		out = append(out, j.UnitName())
	}
	return out
}

// nthID is a job id of its own for each i.
func nthID(i int) string { return fmt.Sprintf("%08x-3c8e-4a57-9e0a-2f4f5c9d8e71", i+16) }

// blockedNode is a manager whose first apply (of a job of its own) holds
// the node in its daemon-reload until the returned release is called;
// what queues meanwhile forms the next batch.
func blockedNode(t *testing.T) (*Manager, *fakeSystemd, func()) {
	t.Helper()
	return blockedNodeObserved(t, nil)
}

// holdQueueJobs makes systemd hold the units of the jobs the queue tests
// use (as on a node where they were named before), so that every plan
// writing them reloads: the reload is what these tests block in and
// count. Units systemd does not hold need none (reloadStep).
func holdQueueJobs(f *fakeSystemd) {
	jobs := []wire.Job{job(idA), job(idB), job(idC), job(nthID(999))}
	for i := range 100 {
		jobs = append(jobs, job(nthID(i)))
	}
	f.hold(jobs...)
}

func (f *fakeSystemd) setOnReload(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onReload = fn
}

func queuedCount(m *Manager) int {
	m.q.mu.Lock()
	defer m.q.mu.Unlock()
	return len(m.q.pending)
}

func countOf(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

type callResult struct {
	rep wire.NodeReport
	err error
}

// queueCalls starts each call concurrently and waits until all are in the
// queue (behind the blocked apply).
func queueCalls(t *testing.T, m *Manager, calls []func() (wire.NodeReport, error)) []chan callResult {
	t.Helper()
	out := make([]chan callResult, len(calls))
	for i, call := range calls {
		out[i] = make(chan callResult, 1)
		go func() { rep, err := call(); out[i] <- callResult{rep, err} }()
	}
	waitFor(t, func() bool { return queuedCount(m) == len(calls) })
	return out
}

// Issue 16: N applies of different jobs that arrive while an apply runs
// become one plan with one daemon-reload, and each caller's report holds
// its own job only.
func TestConcurrentAppliesShareOneReload(t *testing.T) {
	const n = 40
	m, f, release := blockedNode(t)
	calls := make([]func() (wire.NodeReport, error), n)
	for i := range calls {
		calls[i] = func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(nthID(i))}) }
	}
	results := queueCalls(t, m, calls)
	release()
	for i, ch := range results {
		r := <-ch
		u := unit(nthID(i))
		if r.err != nil {
			t.Fatalf("apply %d: %v", i, r.err)
		}
		want := wire.NodeReport{Written: []string{u + ".service", u + ".timer"}, Specs: []string{u}, Enabled: []string{u + ".timer"}, Reloads: 1}
		if !reflect.DeepEqual(r.rep, want) {
			t.Errorf("apply %d report %+v, want %+v", i, r.rep, want)
		}
	}
	calls2 := f.Calls()
	if got := countOf(calls2, "reload"); got != 2 {
		t.Errorf("%d reloads for 1 + %d applies, want 2 (the blocked one, then one for the batch)", got, n)
	}
	// Enabling is the agent's own wants links (no D-Bus call; each
	// caller's report names its enabled timer, checked above).
	if got := countOf(calls2, "start "); got != n+1 {
		t.Errorf("%d timers started, want %d", got, n+1)
	}
}

// A lone change on an idle node does not wait for company: it is applied
// by its own plan at once (no window), as without the queue.
func TestLoneApplyIsItsOwnBatch(t *testing.T) {
	m, f := testManager(t)
	holdQueueJobs(f)
	for i := range 3 {
		if _, err := m.Apply(context.Background(), []wire.Job{job(nthID(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if got := countOf(f.Calls(), "reload"); got != 3 {
		t.Errorf("%d reloads for 3 changes one after the other, want 3", got)
	}
}

// One job's failed start is that caller's error only; the other jobs of
// the batch are started and succeed.
func TestBatchStepFailureIsItsJobsCallerOnly(t *testing.T) {
	m, f, release := blockedNode(t)
	f.failUnit, f.failStart = unit(idB)+".timer", errors.New("unit is masked")
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idB)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idC)}) },
	})
	release()
	for i, ch := range results {
		r := <-ch
		if failing := i == 1; failing != (r.err != nil) {
			t.Errorf("caller %d: error %v", i, r.err)
		}
	}
	for _, id := range []string{idA, idC} {
		if !slices.Contains(f.Calls(), "start "+unit(id)+".timer") || !f.active[unit(id)+".timer"] {
			t.Errorf("%s not started after another job's start failed: %q", unit(id), f.Calls())
		}
	}
}

// A failed daemon-reload fails every caller of the batch (each is
// retried), and leaves the dirty marker: the next apply reloads although
// every file is as wanted, as after an agent killed between its writes
// and its reload.
func TestBatchReloadFailureFailsEveryCallerAndIsRecovered(t *testing.T) {
	m, f, release := blockedNode(t)
	f.setOnReload(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if countOf(f.calls, "reload") == 2 {
			f.failRload = errors.New("connection reset")
		} else {
			f.failRload = nil
		}
	})
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Delete(context.Background(), []string{unit(nthID(999))}, 2) },
	})
	release()
	for i, ch := range results {
		if r := <-ch; r.err == nil || !strings.Contains(r.err.Error(), "daemon-reload") {
			t.Errorf("caller %d: error %v, want the failed reload", i, r.err)
		}
	}
	if _, err := os.Stat(m.layout.Marker()); err != nil {
		t.Fatalf("dirty marker after a failed batch reload: %v", err)
	}
	// Temporal's retry of the apply: nothing left to write, but it reloads.
	rep, err := m.Apply(context.Background(), []wire.Job{job(idA)})
	if err != nil || rep.Reloads != 1 {
		t.Errorf("retry after the failed reload: %+v, %v; want a reload", rep, err)
	}
	if _, err := os.Stat(m.layout.Marker()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dirty marker after the recovering reload: %v", err)
	}
}

// A caller whose context ends while its batch runs leaves at once, and
// the batch goes on for the others (their D-Bus calls are not cancelled);
// one that ends while it waits in the queue is dropped: nothing is applied
// for it.
func TestCallerCancelDoesNotCancelTheBatch(t *testing.T) {
	m, f, release := blockedNode(t)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	ctxDropped, cancelDropped := context.WithCancel(context.Background())
	var once sync.Once
	f.setOnReload(func() { // the batch's reload: A's caller gives up
		f.mu.Lock()
		second := countOf(f.calls, "reload") == 2
		f.mu.Unlock()
		if second {
			once.Do(cancelA)
		}
	})
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(ctxA, []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idB)}) },
		func() (wire.NodeReport, error) { return m.Apply(ctxDropped, []wire.Job{job(idC)}) },
	})
	cancelDropped()
	if r := <-results[2]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("dropped caller: %v", r.err)
	}
	release()
	if r := <-results[0]; !errors.Is(r.err, context.Canceled) {
		t.Errorf("caller that gave up: %v, want its context's error", r.err)
	}
	if r := <-results[1]; r.err != nil {
		t.Errorf("the other caller of the batch: %v", r.err)
	}
	if _, err := m.Plan(context.Background(), apply(job(idA))); err != nil { // waits for the batch to end
		t.Fatal(err)
	}
	for _, id := range []string{idA, idB} {
		if !f.active[unit(id)+".timer"] {
			t.Errorf("%s's timer not started: %q", unit(id), f.Calls())
		}
	}
	if slices.ContainsFunc(f.Calls(), func(c string) bool { return strings.Contains(c, unit(idC)) }) {
		t.Errorf("the dropped caller's job was applied: %q", f.Calls())
	}
	if _, err := os.Stat(m.layout.unitPath(unit(idC), extTimer)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped caller's timer file was written: %v", err)
	}
}

// An invalid request fails alone, before it is queued; the valid ones
// queued with it are applied.
func TestInvalidRequestFailsAlone(t *testing.T) {
	m, _, release := blockedNode(t)
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idA)}) },
	})
	if _, err := m.Delete(context.Background(), []string{"../etc/passwd"}, 3); err == nil {
		t.Error("a delete of an invalid unit name was accepted")
	}
	release()
	if r := <-results[0]; r.err != nil {
		t.Errorf("valid apply queued beside an invalid delete: %v", r.err)
	}
}

// A Temporal retry that arrives while its first attempt still waits
// merges with it: the job is written once, both get the same report.
func TestRetriedActivityWhileItsFirstAttemptWaits(t *testing.T) {
	m, f, release := blockedNode(t)
	j := job(idA, version(2))
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{j}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{j}) },
	})
	release()
	first, second := <-results[0], <-results[1]
	if first.err != nil || second.err != nil || !reflect.DeepEqual(first.rep, second.rep) {
		t.Errorf("attempts: %+v %v / %+v %v", first.rep, first.err, second.rep, second.err)
	}
	if got := countOf(f.Calls(), "start "+unit(idA)); got != 1 {
		t.Errorf("timer started %d times, want 1", got)
	}
}

// Per-job order: an apply and a later delete of one job are two batches
// in that order (the delete wins and leaves its tombstone); a later
// apply of an older version is then refused by the tombstone (stale), as
// one after the other. Two versions in one batch: the higher is installed,
// the lower is reported kept.
func TestQueueKeepsPerJobOrder(t *testing.T) {
	m, f, release := blockedNode(t)
	a, b := unit(idA), unit(idB)
	// Queued one after another, so the queue's order is the test's.
	var results []chan callResult
	for i, call := range []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idA, version(3))})
		},
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idB, version(4))})
		},
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idB, version(2))})
		},
		func() (wire.NodeReport, error) { return m.Delete(context.Background(), []string{a}, 5) },
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idA, version(5))})
		},
	} {
		results = append(results, queueCalls2(t, m, i, []func() (wire.NodeReport, error){call})...)
	}
	rest := []chan callResult{}
	release()
	got := map[int]callResult{}
	for i, ch := range append(results, rest...) {
		got[i] = <-ch
		if got[i].err != nil {
			t.Fatalf("call %d: %v", i, got[i].err)
		}
	}
	// v4 and the older v2 queued after it go in different batches (a
	// version that fails must not hide the one before it): v2, applied
	// after v4, is kept out by the installed spec.
	if got[2].rep.Kept == nil || got[2].rep.Kept[0] != b || len(got[1].rep.Written) != 2 {
		t.Errorf("two versions of %s queued: %+v / %+v", b, got[1].rep, got[2].rep)
	}
	if !slices.Contains(got[3].rep.Removed, a) {
		t.Errorf("delete after apply: %+v", got[3].rep)
	}
	if !slices.Contains(got[4].rep.Stale, a) {
		t.Errorf("apply of the deleted version after the delete: %+v, want stale", got[4].rep)
	}
	if _, err := os.Stat(m.layout.unitPath(a, extTimer)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s's timer after apply, delete, stale apply: %v", a, err)
	}
	spec, err := os.ReadFile(m.layout.specPath(b))
	if err != nil || !strings.Contains(string(spec), `"version": 4,`) {
		t.Errorf("%s's spec: %s %v, want version 4", b, spec, err)
	}
	if n := countOf(f.Calls(), "reload"); n != 3 {
		t.Errorf("%d reloads, want 3: the blocked apply, the batch up to v2, the batch from v2 with the delete (the stale apply changes nothing)", n)
	}
}

// queueCalls2 is queueCalls for calls that join already queued ones.
func queueCalls2(t *testing.T, m *Manager, already int, calls []func() (wire.NodeReport, error)) []chan callResult {
	t.Helper()
	out := make([]chan callResult, len(calls))
	for i, call := range calls {
		out[i] = make(chan callResult, 1)
		go func() { rep, err := call(); out[i] <- callResult{rep, err} }()
		waitFor(t, func() bool { return queuedCount(m) == already+i+1 }) // in this order
	}
	return out
}

// A batch that disables one job and deletes another, both with a
// catch-up waiting, ends each one's catch-up, and only theirs.
func TestBatchPlanEndsEachJobsCatchUp(t *testing.T) {
	catchUp := func(j *wire.Job) { j.CatchUpWindowSec = 3600 }
	obs := with(installed(t, job(idA, catchUp), job(idB, catchUp), job(idC, catchUp)), func(o *Observed) {
		for _, id := range []string{idA, idB, idC} {
			s := unit(id) + extService
			o.Loaded[s] = LoadedUnit{Name: s, LoadState: "loaded", ActiveState: "activating"}
		}
	})
	req := mergeBatch([]Request{apply(job(idA, catchUp, version(2), disabled)), del(2, idB), apply(job(idC, catchUp))})
	req.Now = testNow
	p, err := MakePlan(testLayout, req, obs)
	if err != nil {
		t.Fatal(err)
	}
	var ended []string
	for _, s := range p.Steps {
		if s.Kind == KindEndCatchUp {
			ended = append(ended, s.Unit)
		}
	}
	if want := []string{unit(idA), unit(idB)}; !reflect.DeepEqual(ended, want) {
		t.Errorf("catch-ups ended %q, want %q (plan %v)", ended, want, summary(p))
	}
}

// A batch that panics (here in its daemon-reload) fails its callers with
// an error instead of ending the agent, and the node goes on applying.
func TestBatchPanicFailsItsCallers(t *testing.T) {
	m, f, release := blockedNode(t)
	f.setOnReload(func() {
		if countOf(f.Calls(), "reload") == 2 {
			panic("boom")
		}
	})
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idB)}) },
	})
	release()
	for i, ch := range results {
		if r := <-ch; r.err == nil || !strings.Contains(r.err.Error(), "panicked") {
			t.Errorf("caller %d: %v, want the panic as an error", i, r.err)
		}
	}
	rep, err := m.Apply(context.Background(), []wire.Job{job(idA), job(idB)})
	if err != nil || rep.Reloads != 1 {
		t.Errorf("apply after the panic: %+v %v, want a reload (the dirty marker)", rep, err)
	}
}

// A batch whose callers all give up while its daemon-reload runs (their
// deadlines pass) still waits for the reload: PID 1 finishes it anyway,
// and abandoning it left the dirty marker, so the callers' retries asked
// for a second reload. Waited for, the retries find their changes
// applied and reload nothing.
func TestEveryCallerLeavingDoesNotAbandonTheReload(t *testing.T) {
	m, f, release := blockedNode(t)
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	f.setOnReload(func() {
		f.mu.Lock()
		second := countOf(f.calls, "reload") == 2
		f.mu.Unlock()
		if second { // the batch's reload: every caller gives up meanwhile
			leave()
			time.Sleep(100 * time.Millisecond) // the reload goes on
		}
	})
	results := queueCalls(t, m, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(ctx, []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Apply(ctx, []wire.Job{job(idB)}) },
	})
	release()
	for _, ch := range results {
		<-ch
	}
	if _, err := m.Plan(context.Background(), apply(job(idA))); err != nil { // waits for the batch to end
		t.Fatal(err)
	}
	if got := countOf(f.Calls(), "reload"); got != 2 {
		t.Fatalf("%d reloads before the retries, want 2", got)
	}
	for _, id := range []string{idA, idB} { // Temporal's retries
		if _, err := m.Apply(context.Background(), []wire.Job{job(id)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := countOf(f.Calls(), "reload"); got != 2 {
		t.Errorf("the retries reloaded again (%d reloads, want 2): the batch abandoned its reload", got)
	}
}

// ApplyThen and DeleteThen queue a change and return at once (the node's
// activities complete asynchronously with them): they join a batch with
// waiting callers' changes, and each gets its own part; a change whose
// context ends before its batch starts is dropped, never answered.
func TestQueuedWithoutWaiting(t *testing.T) {
	m, f, release := blockedNode(t)
	answers := make(chan callResult, 3)
	then := func(rep wire.NodeReport, err error) { answers <- callResult{rep, err} }
	// A's answer blocks (an activity's completion call that hangs): it
	// must not hold up the batch's other callers.
	hold := make(chan struct{})
	defer close(hold)
	thenA := func(rep wire.NodeReport, err error) { then(rep, err); <-hold }
	if err := m.ApplyThen(context.Background(), []wire.Job{job(idA)}, thenA); err != nil {
		t.Fatal(err)
	}
	dropped, drop := context.WithCancel(context.Background())
	if err := m.ApplyThen(dropped, []wire.Job{job(idC)}, then); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteThen(context.Background(), []string{"not-a-cron-unit"}, 1, then); err == nil {
		t.Error("an invalid removal was queued, want it refused at once")
	}
	waiting := queueCalls2(t, m, 2, []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idB)}) },
	})
	drop()
	release()
	select {
	case r := <-waiting[0]:
		if r.err != nil || !slices.Equal(r.rep.Specs, []string{unit(idB)}) {
			t.Errorf("the waiting caller: %+v, %v", r.rep, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting caller was not answered while a queued change's answer blocked")
	}
	select {
	case r := <-answers:
		if r.err != nil || !slices.Equal(r.rep.Specs, []string{unit(idA)}) {
			t.Errorf("the queued change's answer: %+v, %v", r.rep, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued change was never answered")
	}
	if _, err := m.Plan(context.Background(), apply(job(idA))); err != nil { // the batch has ended
		t.Fatal(err)
	}
	select {
	case r := <-answers:
		t.Errorf("the dropped change was answered: %+v, %v", r.rep, r.err)
	default:
	}
	if _, err := os.Stat(m.layout.unitPath(unit(idC), extTimer)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped change was applied: %v", err)
	}
	if got := countOf(f.Calls(), "reload"); got != 2 {
		t.Errorf("%d reloads, want 2: the blocked apply's, then one for the batch", got)
	}
}

// A queued change whose context ends while an apply runs leaves the queue
// at once, not when that apply ends (at 10,000 timers an apply outlasts a
// change's deadline, and Temporal's retries would pile up beside the
// changes they replace); it is never answered nor applied.
func TestAChangeLeavesTheQueueAtItsDeadline(t *testing.T) {
	m, _, release := blockedNode(t)
	answered := make(chan error, 1)
	ctx, deadline := context.WithCancel(context.Background())
	defer deadline()
	if err := m.ApplyThen(ctx, []wire.Job{job(idA)}, func(_ wire.NodeReport, err error) { answered <- err }); err != nil {
		t.Fatal(err)
	}
	if queuedCount(m) != 1 {
		t.Fatal("the change is not queued")
	}
	deadline()
	waitFor(t, func() bool { return queuedCount(m) == 0 }) // while the apply still runs
	release()
	if _, err := m.Plan(context.Background(), apply(job(idA))); err != nil { // the queue has drained
		t.Fatal(err)
	}
	select {
	case err := <-answered:
		t.Errorf("a change that left was answered: %v", err)
	default:
	}
	if _, err := os.Stat(m.layout.unitPath(unit(idA), extTimer)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a change that left was applied: %v", err)
	}
}

// Which batch errors may be one change's doing (the batch is then applied
// again in halves) and which are the node's (every caller fails once).
func TestRetryAlone(t *testing.T) {
	bad := errors.New("read cron-acme-x.timer: is a directory")
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"none":                          {nil, false},
		"one unit's step":               {&unitError{"cron-acme-x", bad}, false},
		"a whole-plan failure":          {fmt.Errorf("observe: %w", bad), true},
		"beside a unit's step":          {errors.Join(&unitError{"cron-acme-y", bad}, bad), true},
		"a failed daemon-reload":        {fmt.Errorf("%w: %w", errReload, bad), false},
		"the systemd connection closed": {fmt.Errorf("disable: %w", errClosed), false},
	} {
		if got := retryAlone(tc.err); got != tc.want {
			t.Errorf("%s: retryAlone = %v, want %v", name, got, tc.want)
		}
	}
}
