package unitmgr

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/wire"
)

// A schedule change and a delete keep the spec they replace, so a run
// under way when they land still reports (cron-outcome judges its slot by
// the spec of its version); a command edit keeps nothing.
func TestApplyKeepsTheSpecAScheduleChangeReplaces(t *testing.T) {
	m, _ := testManager(t)
	ctx := context.Background()
	unit := job(idA).UnitName()
	kept := func() []string {
		t.Helper()
		paths, err := jobspec.Kept(m.layout.Paths.SpecDir, unit)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range paths {
			names = append(names, filepath.Base(p))
		}
		return names
	}
	steps := []struct {
		name string
		do   func() error
		want []string
	}{
		{"create", func() error { _, err := m.Apply(ctx, []wire.Job{job(idA)}); return err }, nil},
		{"command edit", func() error {
			_, err := m.Apply(ctx, []wire.Job{job(idA, version(2), func(j *wire.Job) { j.Command = "true" })})
			return err
		}, nil},
		{"schedule change", func() error {
			_, err := m.Apply(ctx, []wire.Job{job(idA, version(3), func(j *wire.Job) { j.Command = "true"; j.Schedule = "30 * * * *" })})
			return err
		}, []string{unit + ".v2.json"}},
		{"delete", func() error { _, err := m.Remove(ctx, []string{unit}); return err }, []string{unit + ".v2.json", unit + ".v3.json"}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := kept(); len(got) != len(s.want) || (len(got) > 0 && (got[0] != s.want[0] || got[len(got)-1] != s.want[len(s.want)-1])) {
			t.Fatalf("after %s: kept %v, want %v", s.name, got, s.want)
		}
	}
	if spec, err := jobspec.Read(filepath.Join(m.layout.Paths.SpecDir, jobspec.PreviousDir, unit+".v2.json")); err != nil || spec.Schedule != "*/5 * * * *" {
		t.Fatalf("kept v2 %+v %v: want the schedule it ran under", spec, err)
	}
}

// An apply that keeps specs, by a change or a delete, also drops the kept
// specs past their time (once for the batch: jobspec.PruneKept).
func TestApplyPrunesExpiredKeptSpecs(t *testing.T) {
	m, _ := testManager(t)
	ctx := context.Background()
	unit := job(idA).UnitName()
	prev := filepath.Join(m.layout.Paths.SpecDir, jobspec.PreviousDir)
	stale := filepath.Join(prev, "cron-acme-gone.v1.json")
	plant := func() {
		t.Helper()
		if err := os.MkdirAll(prev, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stale, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		long := time.Now().Add(-jobspec.KeepPrevious - time.Minute)
		if err := os.Chtimes(stale, long, long); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(after string) {
		t.Helper()
		if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("after %s: the expired kept spec is still there (%v)", after, err)
		}
	}
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	plant()
	if _, err := m.Apply(ctx, []wire.Job{job(idA, version(2), func(j *wire.Job) { j.Schedule = "30 * * * *" })}); err != nil {
		t.Fatal(err)
	}
	gone("a schedule change")
	plant()
	if _, err := m.Remove(ctx, []string{unit}); err != nil {
		t.Fatal(err)
	}
	gone("a delete")
	paths, err := jobspec.Kept(m.layout.Paths.SpecDir, unit)
	if err != nil || len(paths) != 2 {
		t.Fatalf("kept %v (%v): want v1 and v2, the specs the change and the delete replaced", paths, err)
	}
}

// A batch prunes the kept specs once, however many specs it keeps: a
// prune reads the whole directory, and once per spec a delete of n jobs
// cost n² directory entries.
func TestDeleteOfManyJobsPrunesOnce(t *testing.T) {
	m, _ := testManager(t)
	ctx := context.Background()
	if _, err := m.Reconcile(ctx, pagedSet(50)); err != nil {
		t.Fatal(err)
	}
	var prunes int
	real := pruneKeptSpecs
	pruneKeptSpecs = func(dir string, now time.Time) error { prunes++; return real(dir, now) }
	t.Cleanup(func() { pruneKeptSpecs = real })
	if _, err := m.Reconcile(ctx, pagedSet(0)); err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(m.layout.Paths.SpecDir, jobspec.PreviousDir, "*.json"))
	if err != nil || len(paths) != 50 {
		t.Fatalf("%d specs kept (%v), want the 50 deleted", len(paths), err)
	}
	if prunes != 1 {
		t.Fatalf("%d prunes for one batch of 50 deletes, want 1", prunes)
	}
}
