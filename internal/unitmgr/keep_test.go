package unitmgr

import (
	"context"
	"path/filepath"
	"testing"

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
