package unitmgr

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// A catch-up runner waits up to CatchUpSpread before it contends, decided
// under the spec it started with. A disable, a delete or a change of the
// job while its service is busy plans an end-catchup of the service (the
// executor signals the runner only if its record says it is such a
// catch-up), and never a stop of the service: a run under way is not
// killed by a disable. (Found by review: the plan stopped only the timer,
// and the waiting catch-up then ran the disabled or deleted job.)
func TestPlanEndsAWaitingCatchUpWhenTheJobChanges(t *testing.T) {
	catchUp := func(j *wire.Job) { j.CatchUpWindowSec = 3600 }
	a := job(idA, catchUp)
	service := a.UnitName() + extService
	obs := with(installed(t, a), func(o *Observed) {
		o.Loaded[service] = LoadedUnit{Name: service, LoadState: "loaded", ActiveState: "activating"}
	})
	for name, tc := range map[string]struct {
		req  Request
		want bool
	}{
		"disable":                    {Request{Op: OpApply, Jobs: []wire.Job{job(idA, catchUp, version(2), disabled)}, Now: testNow}, true},
		"delete":                     {Request{Op: OpRemove, Names: []string{a.UnitName()}, Version: 2, Now: testNow}, true},
		"schedule":                   {Request{Op: OpApply, Jobs: []wire.Job{job(idA, catchUp, version(2), func(j *wire.Job) { j.Schedule = "0 * * * *" })}, Now: testNow}, true},
		"same job":                   {Request{Op: OpApply, Jobs: []wire.Job{a}, Now: testNow}, false},
		"same version, new revision": {Request{Op: OpApply, Jobs: []wire.Job{job(idA, catchUp, rev(7))}, Now: testNow}, false},
	} {
		p, err := MakePlan(testLayout, tc.req, obs)
		if err != nil {
			t.Fatal(err)
		}
		ends := false
		for _, s := range p.Steps {
			if s.Target == service && s.Kind == KindStop {
				t.Errorf("%s: plan %v stops %s: a run under way would be killed", name, summary(p), service)
			}
			if s.Target == service && s.Kind == KindEndCatchUp {
				ends = true
			}
		}
		if ends != tc.want {
			t.Errorf("%s: plan %v ends a waiting catch-up: %v, want %v", name, summary(p), ends, tc.want)
		}
	}
}

// catchUpNode is cancelNodeKind with a record of trigger.
func catchUpNode(t *testing.T, key, kind string, trigger wire.Trigger) (*Manager, *cancelSystemd, string, <-chan string) {
	t.Helper()
	m, f, unit := cancelNodeKind(t, "activating", key, kind)
	rt := filepath.Join(m.cancel.runtimeRoot, unit)
	if err := runner.WriteRecord(rt, runner.Record{Kind: kind, RunKey: key, Trigger: string(trigger)}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(rt, runner.RecordFile), recordOwner, recordOwner); err != nil {
		t.Fatal(err)
	}
	pid, ended := runnerProcess(t)
	f.mainPID = pid
	return m, f, unit, ended
}

// The executor's end-catchup signals a catch-up that waits (its record
// says "started", trigger catchup), through its pidfd, and stops no unit;
// a catch-up that runs its command ("ran") and an on-time runner that
// elects are left alone.
func TestEndCatchUpSignalsOnlyAWaitingCatchUp(t *testing.T) {
	key := runkey.Scheduled(idA, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name    string
		kind    string
		trigger wire.Trigger
		want    bool
	}{
		{"catch-up waiting", runner.KindStarted, wire.TriggerCatchUp, true},
		{"catch-up running its command", runner.KindRan, wire.TriggerCatchUp, false},
		{"on-time runner electing", runner.KindStarted, wire.TriggerScheduled, false},
		{"run-now electing", runner.KindStarted, wire.TriggerManual, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f, unit, ended := catchUpNode(t, key, tc.kind, tc.trigger)
			e := executor{sys: f, layout: m.layout, log: m.log, endCatchUp: m.endCatchUp}
			plan := Plan{Steps: []Step{{Kind: KindEndCatchUp, Unit: unit, Target: unit + extService, Reason: "job is disabled"}}}
			if _, err := e.run(context.Background(), plan); err != nil {
				t.Fatal(err)
			}
			select {
			case how := <-ended:
				if !tc.want || how != "terminated" {
					t.Fatalf("the runner ended (%s), want SIGTERM only for a waiting catch-up (%v)", how, tc.want)
				}
			case <-time.After(time.Second):
				if tc.want {
					t.Fatal("the waiting catch-up was not signalled")
				}
			}
			if calls := f.Calls(); len(calls) != 0 {
				t.Fatalf("systemd calls %q: the runner is signalled, no unit is stopped", calls)
			}
		})
	}
}

// A cancel of the run a catch-up waits to run stops it (it then runs
// nothing and reports nothing), as it stops a run under way.
func TestCancelRunStopsAWaitingCatchUp(t *testing.T) {
	key := runkey.Scheduled(idA, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	m, _, unit, ended := catchUpNode(t, key, runner.KindStarted, wire.TriggerCatchUp)
	ok, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: unit, RunKey: key})
	if err != nil || !ok {
		t.Fatalf("stopped=%v err=%v, want the waiting catch-up stopped", ok, err)
	}
	select {
	case how := <-ended:
		if !strings.Contains(how, "terminated") {
			t.Fatalf("the runner ended (%s), want SIGTERM", how)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the waiting catch-up was not signalled")
	}
}
