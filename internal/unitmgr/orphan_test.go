package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// tombstoned is obs with tombstones.
func tombstoned(obs Observed, ts map[string]Tombstone) Observed {
	obs.Tombstones = ts
	return obs
}

// createSteps is what installing job idA on an empty node does.
var createSteps = []string{
	"lockdir .locks", "write " + idA + ".json", "write " + idA + ".service", "write " + idA + ".timer",
	"enable " + idA + ".timer", "reload", "start " + idA + ".timer"}

// Orphans are decided by the converge's snapshot, never by file age, and
// tombstones keep removed jobs from coming back with any copy older than
// their removal (issue 11, rule 7).
func TestMakePlanOrphansAndTombstones(t *testing.T) {
	a, b := job(idA), job(idB)
	an, bn := a.UnitName(), b.UnitName()
	hourAgo := testNow.Add(-time.Hour)
	reconcile := func(snap wire.Snapshot, jobs ...wire.Job) Request {
		return Request{Op: OpReconcile, Jobs: jobs, Snapshot: snap, Now: testNow}
	}
	apply := func(jobs ...wire.Job) Request { return Request{Op: OpApply, Jobs: jobs, Now: testNow} }
	removeStepsB := []string{"stop " + idB + ".timer", "disable " + idB + ".timer",
		"remove " + idB + ".timer", "remove " + idB + ".service", "remove " + idB + ".json", "reload"}
	cases := []struct {
		name        string
		req         Request
		obs         Observed
		want        []string
		kept, stale []string
		tombs       map[string]Tombstone // the tombstone file the plan writes; nil: none written
	}{
		{"orphan whose write finished before the snapshot (below xmin): removed, tombstone with the snapshot",
			reconcile(testSnap, a), installed(t, a, job(idB, version(4), rev(90))),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 4, Seen: &testSnap, At: testNow}}},
		{"orphan written between xmin and xmax and not in progress: the snapshot saw it, removed",
			reconcile(testSnap), installed(t, job(idB, rev(103))),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 1, Seen: &testSnap, At: testNow}}},
		{"unit written by a transaction in progress at the snapshot: kept",
			reconcile(testSnap, a), installed(t, a, job(idB, rev(105))), nil, []string{bn}, nil, nil},
		{"unit written after the snapshot (at or above xmax): kept",
			reconcile(testSnap, a), installed(t, a, job(idB, rev(110))), nil, []string{bn}, nil, nil},
		{"spec from before revisions (rev 0): every real snapshot saw it, removed",
			reconcile(testSnap), installed(t, b),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 1, Seen: &testSnap, At: testNow}}},
		{"zero snapshot (a converge task from before snapshots) removes nothing",
			reconcile(wire.Snapshot{}), installed(t, b), nil, []string{bn}, nil, nil},
		{"operator's reconcile: its set is complete, no tombstone",
			Request{Op: OpReconcile, Operator: true, Now: testNow}, installed(t, job(idB, rev(500))),
			removeStepsB, nil, nil, nil},
		{"older version in the snapshot does not revert the installed one",
			reconcile(testSnap, job(idA, version(3), rev(60), disabled)), installed(t, job(idA, version(5), rev(99))),
			nil, []string{an}, nil, nil},
		{"delete: tombstone at the delete's version, first; live tombstones kept, expired ones dropped",
			Request{Op: OpRemove, Names: []string{bn}, Version: 7, Now: testNow},
			tombstoned(installed(t, job(idB, version(6))), map[string]Tombstone{
				an: {Version: 2, At: hourAgo}, "cron-acme-old": {Version: 9, At: testNow.Add(-TombstoneTTL)}}),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 7, At: testNow}, an: {Version: 2, At: hourAgo}}},
		{"delete the core did not version: tombstone at the installed version",
			Request{Op: OpRemove, Names: []string{bn}, Now: testNow}, installed(t, job(idB, version(6))),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 6, At: testNow}}},
		{"delete reaching a node before the job did: only the tombstone",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow}, empty(),
			[]string{"tombstone .tombstones.json"}, nil, nil, map[string]Tombstone{an: {Version: 3, At: testNow}}},
		{"retried delete: the tombstone is there, nothing to do",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow},
			tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}), nil, nil, nil, nil},
		{"operator's removal leaves no tombstone",
			Request{Op: OpRemove, Names: []string{bn}, Operator: true, Now: testNow}, installed(t, b),
			removeStepsB, nil, nil, nil},
		{"tombstone blocks resurrection by a stale apply",
			apply(job(idA, version(2))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"tombstone blocks resurrection by a stale snapshot's copy at the deleted version",
			reconcile(testSnap, job(idA, version(3), rev(80))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"orphan tombstone blocks a stale copy of a version the node never had, by its snapshot",
			reconcile(wire.Snapshot{Xmin: 300, Xmax: 300}, job(idA, version(4), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"a newer re-create after delete (higher version) installs",
			apply(job(idA, version(4), rev(300))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			createSteps, nil, nil, nil},
		{"after an orphan tombstone, a write its snapshot did not see installs",
			apply(job(idA, version(4), rev(150))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			createSteps, nil, nil, nil},
		{"an expired tombstone refuses nothing",
			apply(job(idA, version(2))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: testNow.Add(-TombstoneTTL)}}),
			createSteps, nil, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := MakePlan(testLayout, tc.req, tc.obs)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("steps\n got %q\nwant %q", got, tc.want)
			}
			if !reflect.DeepEqual(p.Kept, tc.kept) || !reflect.DeepEqual(p.Stale, tc.stale) {
				t.Errorf("kept %q stale %q, want kept %q stale %q", p.Kept, p.Stale, tc.kept, tc.stale)
			}
			if got := writtenTombstones(t, p); !reflect.DeepEqual(got, tc.tombs) {
				t.Errorf("tombstones written\n got %+v\nwant %+v", got, tc.tombs)
			}
		})
	}
}

// writtenTombstones decodes the plan's tombstone file, nil if it writes
// none.
func writtenTombstones(t *testing.T, p Plan) map[string]Tombstone {
	t.Helper()
	for _, s := range p.Steps {
		if s.Kind != KindTombstone {
			continue
		}
		if s.Target != testLayout.TombstonePath() || s.Mode != 0o600 {
			t.Errorf("tombstone step %s mode %o", s.Target, s.Mode)
		}
		ts, err := decodeTombstones(s.Content)
		if err != nil {
			t.Fatal(err)
		}
		for n, v := range ts {
			v.At = v.At.UTC()
			ts[n] = v
		}
		return ts
	}
	return nil
}

// The tombstone file keeps the newest MaxTombstones.
func TestTombstonesBounded(t *testing.T) {
	ts := map[string]Tombstone{}
	for i := 0; i < MaxTombstones; i++ {
		ts[fmt.Sprintf("cron-acme-%08d-3c8e-4a57-9e0a-2f4f5c9d8e71", i)] = Tombstone{Version: 1, At: testNow.Add(-time.Duration(i+1) * time.Second)}
	}
	p, err := MakePlan(testLayout, Request{Op: OpRemove, Names: []string{job(idA).UnitName()}, Version: 2, Now: testNow},
		tombstoned(empty(), ts))
	if err != nil {
		t.Fatal(err)
	}
	got := writtenTombstones(t, p)
	if len(got) != MaxTombstones {
		t.Fatalf("%d tombstones written, want %d", len(got), MaxTombstones)
	}
	if _, ok := got[job(idA).UnitName()]; !ok {
		t.Error("the new tombstone was dropped")
	}
	for n, v := range got {
		if v.At.Equal(testNow.Add(-time.Duration(MaxTombstones) * time.Second)) {
			t.Errorf("oldest tombstone %s kept", n)
		}
	}
}

// A delete's tombstone is a root-only file that outlives the agent: a
// restarted agent still refuses the stale apply that was queued behind
// the delete, and installs a newer version.
func TestDeleteTombstoneSurvivesRestart(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA, version(2))}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Delete(ctx, []string{job(idA).UnitName()}, 4); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(m.layout.TombstonePath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("tombstone file: %v, %v; want mode 0600", fi, err)
	}
	restarted := New(f, m.layout.UnitDir, m.layout.Paths, m.log)
	restarted.lockDir, restarted.lockDirOK, restarted.now = m.lockDir, m.lockDirOK, m.now
	rep, err := restarted.Apply(ctx, []wire.Job{job(idA, version(3))})
	if err != nil || rep.Changed() || !reflect.DeepEqual(rep.Stale, []string{job(idA).UnitName()}) {
		t.Errorf("stale apply after the delete: %+v, %v; want refused as stale, nothing changed", rep, err)
	}
	if rep, err = restarted.Apply(ctx, []wire.Job{job(idA, version(5))}); err != nil || len(rep.Written) != 2 {
		t.Errorf("newer version after the delete: %+v, %v; want installed", rep, err)
	}
}

// An operator's removal leaves no tombstone, so the next converge can put
// a live job back; an unreadable tombstone file counts as none instead of
// stopping every change to the node.
func TestOperatorRemovalAndBrokenTombstones(t *testing.T) {
	m, _ := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove(ctx, []string{job(idA).UnitName()}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.layout.TombstonePath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("operator's removal wrote tombstones: %v", err)
	}
	if err := os.WriteFile(m.layout.TombstonePath(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := m.Reconcile(ctx, []wire.Job{job(idA, rev(50))}, testSnap); err != nil || len(rep.Written) != 2 {
		t.Errorf("reconcile with a broken tombstone file: %+v, %v; want the job installed", rep, err)
	}
}
