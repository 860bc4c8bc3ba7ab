package unitmgr

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestPlanHoldsSumsNotContent: a plan holds no file's bytes (issue 16:
// they were most of the agent's memory at 10,000 jobs): a new job's
// writes carry the sum of its rendering and the job to render again, and
// an installed job whose files match is not written.
func TestPlanHoldsSumsNotContent(t *testing.T) {
	j := job(idA)
	want := rendered(t, j)
	p, err := MakePlan(testLayout, Request{Op: OpApply, Jobs: []wire.Job{j}, Now: testNow}, empty())
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, s := range p.Steps {
		if s.Kind != KindWrite {
			continue
		}
		writes++
		if s.Content != nil {
			t.Errorf("%s: the plan holds the file's bytes", s.Target)
		}
		if s.job == nil || s.job.ID != j.ID {
			t.Errorf("%s: no job to render the file from", s.Target)
		}
		if got := sumOf(want[extOf(s.Target)]); s.Sum != got {
			t.Errorf("%s: planned sum %+v, the rendering's is %+v", s.Target, s.Sum, got)
		}
	}
	if writes != 3 {
		t.Errorf("%d writes for a new job, want 3", writes)
	}
	in, kept, err := jobIntent(testLayout, &j, installed(t, j))
	if err != nil || kept {
		t.Fatalf("jobIntent: kept %v, %v", kept, err)
	}
	if steps := writeSteps(testLayout, in, installed(t, j)); len(steps) != 0 {
		t.Errorf("unchanged job: %d write steps", len(steps))
	}
}

// TestSameSizeEditIsRewritten: a file edited on disk without changing its
// size (one byte replaced) is found changed by its hash and rewritten,
// with a reload since systemd holds the unit.
func TestSameSizeEditIsRewritten(t *testing.T) {
	a := job(idA)
	files := rendered(t, a)
	edited := bytes.Replace(files[extService], []byte("TimeoutStartSec=6"), []byte("TimeoutStartSec=9"), 1)
	if bytes.Equal(edited, files[extService]) || len(edited) != len(files[extService]) {
		t.Fatal("test setup: the edit must change one byte and keep the size")
	}
	obs := with(installed(t, a), func(o *Observed) {
		d := o.Disk[a.UnitName()]
		d.diskFile(extService, edited)
		o.Disk[a.UnitName()] = d
	})
	p, err := MakePlan(testLayout, Request{Op: OpApply, Jobs: []wire.Job{a}, Now: testNow}, obs)
	if err != nil {
		t.Fatal(err)
	}
	nameChanges(testLayout, p.Steps, func(string) ([]byte, error) { return edited, nil })
	if got, want := strings.Join(summary(p), "|"), "write "+idA+".service|reload"; got != want {
		t.Errorf("steps %q, want %q", got, want)
	}
	if r := p.Steps[0].Reason; r != "changed: TimeoutStartSec" {
		t.Errorf("reason %q, want the changed directive named", r)
	}
}

// TestWriteRefusesUnplannedContent: the apply writes a file only if its
// rendering at write time hashes to the planned sum. A plan run as made
// writes exactly the rendered bytes; a write whose rendering is not the
// planned one (injected: a sum changed after planning, or the node's
// settings changed between plan and write) ends the run with an error
// that is the agent's (retried, not a failed job), writes none of the
// batch's files and leaves no temporary file behind.
func TestWriteRefusesUnplannedContent(t *testing.T) {
	a := job(idA)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(p *Plan, e *executor)
	}{
		{"as planned", nil},
		{"sum changed after planning", func(p *Plan, _ *executor) {
			for i := range p.Steps {
				if p.Steps[i].Kind == KindWrite && strings.HasSuffix(p.Steps[i].Target, extTimer) {
					p.Steps[i].Sum.Hash ^= 1
				}
			}
		}},
		{"node settings changed between plan and write", func(_ *Plan, e *executor) {
			e.layout.Node.DenyAddresses = []string{"10.0.0.0/8"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f := testManager(t)
			p, err := m.plan(ctx, Request{Op: OpApply, Jobs: []wire.Job{a}})
			if err != nil {
				t.Fatal(err)
			}
			e := executor{sys: f, layout: m.layout, log: m.log, lockDir: m.lockDir}
			if tc.tamper != nil {
				tc.tamper(&p, &e)
			}
			rep, err := e.run(ctx, p)
			paths := map[string]string{extSpec: m.layout.specPath(a.UnitName()),
				extService: m.layout.unitPath(a.UnitName(), extService), extTimer: m.layout.unitPath(a.UnitName(), extTimer)}
			if tc.tamper == nil {
				if err != nil {
					t.Fatal(err)
				}
				for ext, want := range renderedIn(t, m.layout, a) {
					if got, err := os.ReadFile(paths[ext]); err != nil || !bytes.Equal(got, want) {
						t.Errorf("%s: written %q (%v), want the rendering", ext, got, err)
					}
				}
				return
			}
			if !errors.Is(err, errUnplanned) {
				t.Fatalf("run: %v, want the unplanned rendering refused", err)
			}
			if len(rep.Failed) != 0 || len(rep.Written) != 0 || len(rep.Specs) != 0 {
				t.Errorf("report %+v: a refused write is the agent's fault, and nothing was written", rep)
			}
			for ext, path := range paths {
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s written though its batch was refused: %v", ext, err)
				}
			}
			for _, dir := range []string{m.layout.UnitDir, m.layout.Paths.SpecDir} {
				names, _ := filepath.Glob(filepath.Join(dir, atomicfile.TempPrefix+"*"))
				if len(names) != 0 {
					t.Errorf("temporary files left: %q", names)
				}
			}
			for _, c := range f.Calls() {
				if strings.HasPrefix(c, "start") {
					t.Errorf("a timer started after a refused write: %q", f.Calls())
				}
			}
		})
	}
}
