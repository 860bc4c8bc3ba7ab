package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// waitAll collects the results of queued calls.
func waitAll(chans []chan callResult) []callResult {
	out := make([]callResult, len(chans))
	for i, ch := range chans {
		out[i] = <-ch
	}
	return out
}

// One job whose files cannot be read (a directory where its timer should
// be) fails the plan of its batch; the batch is then applied change by
// change, so only that job's caller gets the error: the unrelated apply
// and disable queued with it are applied (the review found them failing
// with it, while the disabled timer kept firing).
func TestOneBadJobFailsOnlyItsOwnCaller(t *testing.T) {
	m, f, release := blockedNode(t)
	if err := os.MkdirAll(filepath.Join(m.layout.unitPath(unit(idB), extTimer), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	var chans []chan callResult
	for i, call := range []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Delete(context.Background(), []string{unit(idB)}, 3) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idC, disabled)}) },
	} {
		chans = append(chans, queueCalls2(t, m, i, []func() (wire.NodeReport, error){call})...)
	}
	release()
	got := waitAll(chans)
	if got[0].err != nil || got[2].err != nil {
		t.Errorf("unrelated callers failed with the bad job: %v / %v", got[0].err, got[2].err)
	}
	if got[1].err == nil || !strings.Contains(got[1].err.Error(), "is a directory") {
		t.Errorf("the bad job's caller: %v, want its own read error", got[1].err)
	}
	if !f.active[unit(idA)+".timer"] {
		t.Errorf("%s's timer is not active", unit(idA))
	}
	if _, err := os.Lstat(filepath.Join(f.wantsDir, unit(idC)+".timer")); err == nil {
		t.Errorf("%s's disabled timer is still enabled", unit(idC))
	}
}

// A version queued after another of the same job goes in a later batch:
// when it fails to render, the version before it is still applied, and
// its caller is told so (merged, the failing version hid it: "kept",
// with neither on disk).
func TestAFailingVersionDoesNotHideTheOneBefore(t *testing.T) {
	m, _, release := blockedNode(t)
	var chans []chan callResult
	for i, call := range []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idA, version(2))})
		},
		func() (wire.NodeReport, error) {
			return m.Apply(context.Background(), []wire.Job{job(idA, version(3), func(j *wire.Job) { j.OverlapPolicy = "bogus" })})
		},
	} {
		chans = append(chans, queueCalls2(t, m, i, []func() (wire.NodeReport, error){call})...)
	}
	release()
	got := waitAll(chans)
	if got[0].err != nil || len(got[0].rep.Written) != 2 || len(got[0].rep.Kept) != 0 {
		t.Errorf("version 2: %+v %v, want it written", got[0].rep, got[0].err)
	}
	if len(got[1].rep.Failed) != 1 {
		t.Errorf("version 3: %+v, want it failed", got[1].rep)
	}
	spec, err := os.ReadFile(m.layout.specPath(unit(idA)))
	if err != nil || !strings.Contains(string(spec), `"version": 2,`) {
		t.Errorf("spec on disk: %s %v, want version 2", spec, err)
	}
	if slices.Contains(got[1].rep.Kept, unit(idA)) {
		t.Errorf("version 3 reported kept")
	}
}

// Issue 16: a batch of many changes with one bad among them is applied
// again in halves, not change by change: the bad change's caller alone
// gets its error, every other change is applied, and the reloads are
// about log2 of the batch (one by one, the 63 good changes cost 63).
func TestOneBadChangeAmongManyIsFoundByHalving(t *testing.T) {
	const n, bad = 64, 37
	m, f, release := blockedNode(t)
	if err := os.MkdirAll(filepath.Join(m.layout.unitPath(unit(nthID(bad)), extTimer), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := make([]func() (wire.NodeReport, error), n)
	for i := range calls {
		calls[i] = func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(nthID(i))}) }
	}
	before := countOf(f.Calls(), "reload")
	results := queueCalls(t, m, calls)
	release()
	for i, r := range waitAll(results) {
		if i == bad {
			if r.err == nil || !strings.Contains(r.err.Error(), "is a directory") {
				t.Errorf("the bad change's caller: %v, want its own read error", r.err)
			}
			continue
		}
		u := unit(nthID(i))
		if r.err != nil {
			t.Errorf("caller %d failed with the bad change: %v", i, r.err)
		}
		if !slices.Equal(r.rep.Specs, []string{u}) || !slices.Equal(r.rep.Enabled, []string{u + ".timer"}) {
			t.Errorf("caller %d's report %+v, want its own unit %s only", i, r.rep, u)
		}
		if !f.active[u+".timer"] {
			t.Errorf("%s is not active", u)
		}
	}
	// The blocked apply's reload, then one per half that holds no bad
	// change: 32, 16, 8, 4, 2 and 1 changes.
	if got := countOf(f.Calls(), "reload") - before; got > 1+6 {
		t.Errorf("%d reloads for a batch of %d with one bad change, want at most 7 (halving)", got, n)
	}
}

// planHook observes each plan's end and calls fn with its count (1 for
// the first plan after it was set).
type planHook struct {
	mu sync.Mutex
	n  int
	fn func(n int)
}

func (h *planHook) Applied(string, bool, time.Duration, map[string]int, error, time.Time) {
	h.mu.Lock()
	h.n++
	n := h.n
	h.mu.Unlock()
	h.fn(n)
}

func (h *planHook) Reloaded(time.Duration) {}

// blockedNodeObserved is blockedNode with o (if not nil) observing every
// plan, the blocked one's first.
func blockedNodeObserved(t *testing.T, o Observer) (*Manager, *fakeSystemd, func()) {
	t.Helper()
	m, f := testManager(t)
	if o != nil {
		m.SetObserver(o)
	}
	holdQueueJobs(f)
	f.inReload = make(chan struct{})
	first := make(chan error, 1)
	go func() { _, err := m.Apply(context.Background(), []wire.Job{job(nthID(999))}); first <- err }()
	waitFor(t, func() bool { return slices.Contains(f.Calls(), "reload") })
	return m, f, func() {
		close(f.inReload)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
}

// A caller that leaves while its batch's merged plan fails is left out of
// the halves: nothing is applied for it, it gets its context's error, and
// every other caller still gets its own answer.
func TestCallerThatLeftIsNotAppliedInAHalf(t *testing.T) {
	ctxA, leave := context.WithCancel(context.Background())
	defer leave()
	hook := &planHook{fn: func(n int) {
		if n == 2 { // the blocked apply's plan, then the merged one
			leave()
		}
	}}
	m, f, release := blockedNodeObserved(t, hook)
	if err := os.MkdirAll(filepath.Join(m.layout.unitPath(unit(idC), extTimer), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	var chans []chan callResult
	for i, call := range []func() (wire.NodeReport, error){
		func() (wire.NodeReport, error) { return m.Apply(ctxA, []wire.Job{job(idA)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idB)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(idC)}) },
		func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(nthID(5))}) },
	} {
		chans = append(chans, queueCalls2(t, m, i, []func() (wire.NodeReport, error){call})...)
	}
	release()
	got := waitAll(chans)
	if !errors.Is(got[0].err, context.Canceled) {
		t.Errorf("the caller that left: %v, want its context's error", got[0].err)
	}
	if _, err := os.Stat(m.layout.unitPath(unit(idA), extTimer)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the change of the caller that left was applied (%v)", err)
	}
	for i, id := range map[int]string{1: idB, 3: nthID(5)} {
		if got[i].err != nil || !slices.Equal(got[i].rep.Specs, []string{unit(id)}) || !f.active[unit(id)+".timer"] {
			t.Errorf("caller %d: %+v, %v; want its own unit applied", i, got[i].rep, got[i].err)
		}
	}
	if got[2].err == nil || !strings.Contains(got[2].err.Error(), "is a directory") {
		t.Errorf("the bad change's caller: %v, want its own read error", got[2].err)
	}
}

// A half's callers are answered when their half ends, not when the last
// half does: they would otherwise hold their activity slots, and run out
// their deadlines, through the other halves' plans and reloads.
func TestAHalfsCallersAreAnsweredWhenItEnds(t *testing.T) {
	const bad = 3
	var chans []chan callResult
	answered := make(chan error, 1)
	hook := &planHook{fn: func(n int) {
		// Plans: the blocked apply, the merged batch (fails), the first
		// half [0 1] (applied), then the second half [2 3] (fails): by
		// its end the first half's callers must have their answers.
		if n != 4 {
			return
		}
		for _, i := range []int{0, 1} {
			select {
			case r := <-chans[i]:
				chans[i] <- r
			case <-time.After(5 * time.Second):
				answered <- fmt.Errorf("caller %d of the applied first half has no answer while the second half runs", i)
				return
			}
		}
		answered <- nil
	}}
	m, _, release := blockedNodeObserved(t, hook)
	if err := os.MkdirAll(filepath.Join(m.layout.unitPath(unit(nthID(bad)), extTimer), "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := make([]func() (wire.NodeReport, error), 4)
	for i := range calls {
		calls[i] = func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{job(nthID(i))}) }
	}
	for i := range calls {
		chans = append(chans, queueCalls2(t, m, i, calls[i:i+1])...)
	}
	release()
	if err := <-answered; err != nil {
		t.Error(err)
	}
	for i, r := range waitAll(chans) {
		if (r.err != nil) != (i == bad) {
			t.Errorf("caller %d: %v", i, r.err)
		}
	}
}

// disableHook is a systemd whose DisableUnitFiles calls fn first.
type disableHook struct {
	*fakeSystemd
	fn func(files []string) error
}

func (h *disableHook) DisableUnitFiles(ctx context.Context, files []string) error {
	if err := h.fn(files); err != nil {
		return err
	}
	return h.fakeSystemd.DisableUnitFiles(ctx, files)
}

// A batch that panics in a later half keeps the answers its earlier half
// gave (those changes were applied) and fails only the callers not yet
// answered; each caller gets exactly one answer.
func TestAPanicInALaterHalfKeepsEarlierAnswers(t *testing.T) {
	m, f := testManager(t)
	holdQueueJobs(f)
	if _, err := m.Apply(context.Background(), []wire.Job{job(idC)}); err != nil {
		t.Fatal(err)
	}
	cTimer := unit(idC) + ".timer"
	var disables int
	m.sys = &disableHook{fakeSystemd: f, fn: func(files []string) error {
		disables++
		switch {
		case disables == 2: // the second half's plan
			panic("boom in a half")
		case slices.Contains(files, cTimer):
			return errors.New("systemd refused " + cTimer) // fails the merged plan as a whole
		}
		return nil
	}}
	f.inReload = make(chan struct{})
	first := make(chan error, 1)
	go func() { _, err := m.Apply(context.Background(), []wire.Job{job(nthID(999), version(7))}); first <- err }()
	waitFor(t, func() bool { return countOf(f.Calls(), "reload") >= 2 })
	// Queued without waiting (as the node's activities are), so that a
	// second answer would be seen.
	answers := make([]chan error, 4)
	for i, j := range []wire.Job{job(idA), job(idB), job(idC, version(2), disabled), job(nthID(5))} {
		answers[i] = make(chan error, 2)
		if err := m.ApplyThen(context.Background(), []wire.Job{j}, func(_ wire.NodeReport, err error) { answers[i] <- err }); err != nil {
			t.Fatal(err)
		}
	}
	close(f.inReload)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, ch := range answers {
		err := <-ch
		panicked := err != nil && strings.Contains(err.Error(), "panicked")
		if applied := i < 2; applied == panicked || (applied && err != nil) {
			t.Errorf("caller %d: %v; want the first half's callers answered with success, the others with the panic", i, err)
		}
	}
	if _, err := m.Plan(context.Background(), apply(job(idA))); err != nil { // the batch has ended
		t.Fatal(err)
	}
	for i, ch := range answers {
		select {
		case err := <-ch:
			t.Errorf("caller %d answered twice (then %v)", i, err)
		default:
		}
	}
}
