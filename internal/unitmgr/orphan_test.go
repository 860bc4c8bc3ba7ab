package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/trust"
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
	"enable " + idA + ".timer", "start " + idA + ".timer"}

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
		{"spec without a revision (rev 0) older than LegacyOrphanAge: removed, the upgrade path",
			reconcile(testSnap), specAt(installed(t, b), bn, testNow.Add(-LegacyOrphanAge)),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: 1, Seen: &testSnap, At: testNow}}},
		{"spec without a revision younger than LegacyOrphanAge: unknown, not seen, kept",
			reconcile(testSnap), specAt(installed(t, b), bn, testNow.Add(-LegacyOrphanAge+time.Second)), nil, []string{bn}, nil, nil},
		{"spec without a revision and the zero snapshot: kept however old",
			reconcile(wire.Snapshot{}), installed(t, b), nil, []string{bn}, nil, nil},
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
			map[string]Tombstone{bn: {Version: 7, Deleted: true, At: testNow}, an: {Version: 2, At: hourAgo}}},
		{"delete the core did not version (a task from before versions): tombstone refusing every version",
			Request{Op: OpRemove, Names: []string{bn}, Now: testNow}, installed(t, job(idB, version(6))),
			append([]string{"tombstone .tombstones.json"}, removeStepsB...), nil, nil,
			map[string]Tombstone{bn: {Version: AnyVersion, Deleted: true, At: testNow}}},
		{"unversioned delete reaching a node that never had the job: a tombstone refusing every version",
			Request{Op: OpRemove, Names: []string{an}, Now: testNow}, empty(),
			[]string{"tombstone .tombstones.json"}, nil, nil, map[string]Tombstone{an: {Version: AnyVersion, Deleted: true, At: testNow}}},
		{"... which refuses the job's apply of any version",
			apply(job(idA, version(40), rev(900))), tombstoned(empty(), map[string]Tombstone{an: {Version: AnyVersion, Deleted: true, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"delete reaching a node before the job did: only the tombstone",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow}, empty(),
			[]string{"tombstone .tombstones.json"}, nil, nil, map[string]Tombstone{an: {Version: 3, Deleted: true, At: testNow}}},
		{"retried delete: the tombstone is there, nothing to do",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow},
			tombstoned(empty(), map[string]Tombstone{an: {Version: 3, Deleted: true, At: hourAgo}}), nil, nil, nil, nil},
		{"delete after an orphan removal: the tombstone becomes a delete's",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow},
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			[]string{"tombstone .tombstones.json"}, nil, nil, map[string]Tombstone{an: {Version: 3, Seen: &testSnap, Deleted: true, At: testNow}}},
		{"operator's removal leaves no tombstone",
			Request{Op: OpRemove, Names: []string{bn}, Operator: true, Now: testNow}, installed(t, b),
			removeStepsB, nil, nil, nil},
		{"tombstone blocks resurrection by a stale apply",
			apply(job(idA, version(2))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"tombstone blocks resurrection by a stale snapshot's copy at the deleted version",
			reconcile(testSnap, job(idA, version(3), rev(80))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"orphan tombstone blocks a stale copy of a version the node never had, by its snapshot (older converge)",
			reconcile(wire.Snapshot{Xmin: 96, Xmax: 98}, job(idA, version(4), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"... and a stale apply of it",
			apply(job(idA, version(4), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"a converge whose snapshot overlaps the orphan's (xmin below its xmax) does not lift it",
			reconcile(wire.Snapshot{Xmin: 109, Xmax: 120}, job(idA, version(2), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"a converge whose snapshot is strictly newer (xmin at the orphan's xmax) and lists the job lifts the orphan tombstone",
			reconcile(wire.Snapshot{Xmin: 110, Xmax: 120}, job(idA, version(2), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}, bn: {Version: 5, Deleted: true, At: hourAgo}}),
			append([]string{"tombstone .tombstones.json"}, createSteps...), nil, nil,
			map[string]Tombstone{bn: {Version: 5, Deleted: true, At: hourAgo}}},
		{"a newer converge never lifts a delete's tombstone",
			reconcile(wire.Snapshot{Xmin: 500, Xmax: 500}, job(idA, version(2), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 3, Seen: &testSnap, Deleted: true, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"an apply never lifts an orphan tombstone",
			apply(job(idA, version(2), rev(95))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			nil, nil, []string{an}, nil},
		{"an operator's reconcile listing the job installs it and lifts even a delete's tombstone",
			Request{Op: OpReconcile, Operator: true, Jobs: []wire.Job{job(idA, version(2))}, Now: testNow},
			tombstoned(empty(), map[string]Tombstone{an: {Version: 3, Deleted: true, At: hourAgo}}),
			append([]string{"tombstone .tombstones.json"}, createSteps...), nil, nil, map[string]Tombstone{}},
		{"a newer re-create after delete (higher version) installs",
			apply(job(idA, version(4), rev(300))), tombstoned(empty(), map[string]Tombstone{an: {Version: 3, At: hourAgo}}),
			createSteps, nil, nil, nil},
		{"after an orphan tombstone, a write its snapshot did not see installs",
			apply(job(idA, version(4), rev(150))),
			tombstoned(empty(), map[string]Tombstone{an: {Version: 2, Seen: &testSnap, At: hourAgo}}),
			createSteps, nil, nil, nil},
		{"an unreadable tombstone file is set aside before a removal rewrites it",
			Request{Op: OpRemove, Names: []string{an}, Version: 3, Now: testNow},
			with(empty(), func(o *Observed) { o.TombstonesUnreadable = true }),
			[]string{"set-aside .tombstones.json.corrupt-20261122T050000Z", "tombstone .tombstones.json"}, nil, nil,
			map[string]Tombstone{an: {Version: 3, Deleted: true, At: testNow}}},
		{"... and left alone by a plan that records nothing",
			apply(job(idA)), with(empty(), func(o *Observed) { o.TombstonesUnreadable = true }), createSteps, nil, nil, nil},
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

// specAt is obs with the spec of unit name written at t.
func specAt(obs Observed, name string, t time.Time) Observed {
	d := obs.Disk[name]
	d.SpecMod = t
	obs.Disk[name] = d
	return obs
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
		ts[fmt.Sprintf("cron-t%d-%08d-3c8e-4a57-9e0a-2f4f5c9d8e71", i%10, i)] = Tombstone{Version: 1, At: testNow.Add(-time.Duration(i+1) * time.Second)}
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

// A tenant that churns through jobs evicts its own oldest tombstones, not
// other tenants' fresh ones.
func TestTombstonesBoundedPerTenant(t *testing.T) {
	ts := map[string]Tombstone{}
	for i := 0; i < 100; i++ { // other tenants' tombstones, older than the churn
		ts[fmt.Sprintf("cron-quiet%d-%08d-3c8e-4a57-9e0a-2f4f5c9d8e71", i%3, i)] = Tombstone{Version: 1, At: testNow.Add(-time.Hour)}
	}
	for i := 0; i < MaxTombstones; i++ {
		ts[fmt.Sprintf("cron-churn-%08d-3c8e-4a57-9e0a-2f4f5c9d8e71", i)] = Tombstone{Version: 1, At: testNow.Add(-time.Duration(i+1) * time.Millisecond)}
	}
	got := prune(ts)
	churn, quiet := 0, 0
	for n := range got {
		if unitTenant(n) == "churn" {
			churn++
		} else {
			quiet++
		}
	}
	if churn != MaxTombstonesPerTenant || quiet != 100 {
		t.Errorf("kept %d of the churning tenant's and %d of the others' tombstones, want %d and 100", churn, quiet, MaxTombstonesPerTenant)
	}
	if unitTenant("cron-my-shop-0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71") != "my-shop" || unitTenant("cron-x") != "cron-x" {
		t.Error("unitTenant")
	}
}

// F1 of the review: a live job whose spec has no revision (written by an
// agent from before revisions, or from a job an old core worker loaded in
// a rolling upgrade) was removed by any converge, its snapshot deemed to
// have seen revision 0, and the orphan tombstone then refused the job's
// next converge, its apply and the operator's reconcile. Revision 0 is
// unknown, not seen: such a unit goes only once its spec is older than
// LegacyOrphanAge; an orphan tombstone is lifted by a newer converge that
// lists the job; an operator's reconcile lifts any tombstone.
func TestRevZeroLiveJobNotRemovedNorLockedOut(t *testing.T) {
	m, _ := testManager(t)
	ctx := context.Background()
	name := job(idA).UnitName()
	spec := m.layout.specPath(name)
	// The job was created after testSnap (its real rev is 200, at or above
	// xmax 110), but the copy the node got carries no rev.
	if _, err := m.Apply(ctx, []wire.Job{job(idA, version(1))}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(spec, testNow, testNow.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The converge read before the job existed arrives now.
	rep, err := m.Reconcile(ctx, wire.DesiredSet{Snapshot: testSnap})
	if err != nil || len(rep.Removed) > 0 || !reflect.DeepEqual(rep.Kept, []string{name}) {
		t.Fatalf("old converge vs a live job without a revision: %+v, %v; want it kept", rep, err)
	}
	// The same converge more than LegacyOrphanAge later removes it (the
	// upgrade path for units of jobs deleted while the node was down); if
	// the job is in fact alive (a converge delayed past every deadline),
	// the next converge puts it back.
	if err := os.Chtimes(spec, testNow, testNow.Add(-LegacyOrphanAge-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if rep, err = m.Reconcile(ctx, wire.DesiredSet{Snapshot: testSnap}); err != nil || len(rep.Removed) == 0 {
		t.Fatalf("old spec without a revision: %+v, %v; want removed", rep, err)
	}
	// A converge whose snapshot is newer than the tombstone's lists the
	// job: it is alive, the tombstone goes, the job is installed.
	rep, err = m.Reconcile(ctx, wire.DesiredSet{Jobs: []wire.Job{job(idA, version(1), rev(200))}, Snapshot: wire.Snapshot{Xmin: 300, Xmax: 300}})
	if err != nil || len(rep.Stale) > 0 || len(rep.Written) != 2 {
		t.Fatalf("newer converge listing the job: %+v, %v; want it installed", rep, err)
	}
	// Its own workflow's apply is no longer refused.
	if rep, err = m.Apply(ctx, []wire.Job{job(idA, version(1), rev(200))}); err != nil || len(rep.Stale) > 0 {
		t.Errorf("apply of the live job: %+v, %v; want not stale", rep, err)
	}
	// An operator's reconcile lifts even a delete's tombstone.
	if _, err := m.Delete(ctx, []string{name}, 2); err != nil {
		t.Fatal(err)
	}
	rep, err = m.ReconcileExactly(ctx, []wire.Job{job(idA, version(1), rev(200))})
	if err != nil || len(rep.Stale) > 0 || len(rep.Written) != 2 {
		t.Errorf("operator's reconcile after a delete: %+v, %v; want the job installed", rep, err)
	}
	b, err := os.ReadFile(m.layout.TombstonePath())
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := decodeTombstones(b); err != nil || len(ts) != 0 {
		t.Errorf("tombstones after the operator's reconcile: %+v, %v; want none", ts, err)
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
// stopping every change to the node, and the next removal sets it aside
// rather than overwriting it.
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
	if rep, err := m.Reconcile(ctx, wire.DesiredSet{Jobs: []wire.Job{job(idA, rev(50))}, Snapshot: testSnap}); err != nil || len(rep.Written) != 2 {
		t.Errorf("reconcile with a broken tombstone file: %+v, %v; want the job installed", rep, err)
	}
	if _, err := m.Delete(ctx, []string{job(idB).UnitName()}, 3); err != nil {
		t.Fatal(err)
	}
	aside := m.layout.TombstonePath() + ".corrupt-20261122T050000Z"
	if b, err := os.ReadFile(aside); err != nil || string(b) != "{not json" {
		t.Errorf("broken tombstone file set aside: %q, %v; want its content kept", b, err)
	}
	b, err := os.ReadFile(m.layout.TombstonePath())
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := decodeTombstones(b); err != nil || ts[job(idB).UnitName()].Version != 3 {
		t.Errorf("new tombstone file: %+v, %v", ts, err)
	}
}

// A node accepts no signed task older than trust.MaxMaxAge, which must be
// within LegacyOrphanAge, itself well within the tombstones' lifetime.
func TestAgesOrdered(t *testing.T) {
	if !(trust.DefaultMaxAge <= trust.MaxMaxAge && trust.MaxMaxAge <= LegacyOrphanAge && LegacyOrphanAge < TombstoneTTL) {
		t.Errorf("max_age %s (at most %s), legacy orphan age %s, tombstone TTL %s: want increasing",
			trust.DefaultMaxAge, trust.MaxMaxAge, LegacyOrphanAge, TombstoneTTL)
	}
}
