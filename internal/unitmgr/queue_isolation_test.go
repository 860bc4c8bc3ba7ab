package unitmgr

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
