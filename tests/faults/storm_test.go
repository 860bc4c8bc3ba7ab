//go:build e2e

package faults

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/tests/harness"
)

// phase is a stretch of time in which the job had one schedule and one
// enabled state. began is when its change began (store, then each node),
// from is when the change had reached the last node, until is when the
// next change began.
type phase struct {
	schedule           string
	enabled            bool
	began, from, until time.Time
}

// TestEditStorm (issue 11, scenario b): command-only edits, schedule edits
// and a disable → 30 s → enable, each landing at a random offset inside a
// slot. No run while disabled, no run off the schedule in force, no slot of
// an enabled stretch missed, no slot run twice.
func TestEditStorm(t *testing.T) {
	t.Parallel()
	const every = 10 * time.Second
	ctx := context.Background()
	const a, b = "*/10 * * * * *", "5-59/10 * * * * *"
	marker := filepath.Join(c.Shared, "www/acme/public/storm.log")
	job := c.NewJob(t, "acme", a, harness.WitnessCommand("storm.log", "echo v1"), 20, 64, 0)
	phases := []phase{{schedule: a, enabled: true, began: time.Now()}}
	applyAll(t, job)
	phases[0].from = time.Now()
	dumpOnFailure(t, job.UnitName())

	// change applies one change through the store and on every node at a
	// random offset inside a slot, and opens the next phase.
	change := func(wait time.Duration, next phase, do func() error) {
		time.Sleep(wait)
		untilNextSlot(every, time.Duration(rand.Int64N(int64(every))))
		phases[len(phases)-1].until = time.Now()
		next.began = time.Now()
		if err := do(); err != nil {
			t.Fatal(err)
		}
		applyAll(t, desired(t, job.ID))
		next.from = time.Now()
		phases = append(phases, next)
	}
	edit := func(schedule, command string) func() error {
		return func() error {
			_, err := c.Store.UpdateJob(ctx, job.ID, 0, func(f store.JobFields) (store.JobFields, error) {
				f.Schedule, f.Command = schedule, command
				return f, nil
			})
			return err
		}
	}
	change(20*time.Second, phase{schedule: a, enabled: true}, edit(a, harness.WitnessCommand("storm.log", "echo v2")))
	change(20*time.Second, phase{schedule: b, enabled: true}, edit(b, harness.WitnessCommand("storm.log", "echo v2")))
	change(20*time.Second, phase{schedule: b, enabled: true}, edit(b, harness.WitnessCommand("storm.log", "echo v3")))
	change(10*time.Second, phase{schedule: b, enabled: false}, func() error {
		_, err := c.Store.DisableJob(ctx, job.ID, 0)
		return err
	})
	change(30*time.Second, phase{schedule: b, enabled: true}, func() error {
		_, err := c.Store.EnableJob(ctx, job.ID, 0)
		return err
	})
	change(20*time.Second, phase{schedule: a, enabled: true}, edit(a, harness.WitnessCommand("storm.log", "echo v4")))
	time.Sleep(30 * time.Second)
	phases[len(phases)-1].until = time.Now()
	disableEverywhere(t, job.ID, 3*time.Second)

	execs := harness.ReadWitness(t, marker)
	harness.CheckExactlyOnce(t, execs, runsBySlot(t, job.ID))
	ran := map[time.Time]bool{}
	for _, e := range execs {
		ran[e.Key.Slot] = true
		if !allowedSlot(t, phases, e.Key.Slot) {
			t.Errorf("slot %s ran on %s: off the schedule in force or while disabled", e.Key.Slot, e.Node)
		}
	}
	for _, p := range phases {
		if !p.enabled {
			continue
		}
		sched, err := schedule.ParseWithSeconds(p.schedule, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		// A slot must have run if its whole fire window (the random
		// delay is under half the interval) lies inside the phase.
		for s := sched.Next(p.from); s.Add(every / 2).Before(p.until); s = sched.Next(s) {
			if !ran[s] {
				t.Errorf("slot %s of %q was missed (phase %s – %s)", s, p.schedule, p.from.Format(time.TimeOnly), p.until.Format(time.TimeOnly))
			}
		}
	}
	t.Logf("%d phases, %d executions", len(phases), len(execs))
}

// allowedSlot reports whether slot is a fire time of an enabled phase that
// it falls in, or of either side of a change that was landing at the time.
func allowedSlot(t *testing.T, phases []phase, slot time.Time) bool {
	t.Helper()
	for i, p := range phases {
		landing := !slot.Before(p.began) && slot.Before(p.from)
		inside := !slot.Before(p.from) && slot.Before(p.until)
		if !inside && !landing {
			continue
		}
		candidates := []phase{p}
		if landing && i > 0 {
			candidates = append(candidates, phases[i-1])
		}
		for _, q := range candidates {
			sched, err := schedule.ParseWithSeconds(q.schedule, "UTC")
			if err != nil {
				t.Fatal(err)
			}
			if q.enabled && sched.Next(slot.Add(-time.Second)).Equal(slot) {
				return true
			}
		}
		return false
	}
	return false
}
