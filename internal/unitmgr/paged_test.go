package unitmgr

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/wire"
)

// A paged converge finds job B gone in page 2's snapshot, read after B's
// last update (tx 120) and its delete-mark (tx 125); page 1's snapshot,
// and so the pages' Common, saw neither. B's orphan tombstone must record
// page 2's snapshot, the read that found B gone: with the Common, the
// ApplyJobs of that update (queued before the delete, delivered after the
// converge) is not refused, and B's timer comes back on the node until
// the delete's RemoveUnits arrives. (From a review.)
func TestPagedOrphanTombstoneRecordsThePageThatFoundItGone(t *testing.T) {
	a := job(idA, rev(50))
	s1 := wire.Snapshot{Xmin: 100, Xmax: 110} // page 1: [.. idA]
	s2 := wire.Snapshot{Xmin: 130, Xmax: 130} // page 2: (idA ..]; B was updated by tx 120, then marked deleting by tx 125
	n := 0
	set, err := desiredset.Assemble(context.Background(), func(context.Context, string) (wire.DesiredPage, error) {
		n++
		if n == 1 {
			return wire.DesiredPage{Jobs: []wire.Job{a}, Snapshot: s1, Next: idA}, nil
		}
		return wire.DesiredPage{Jobs: []wire.Job{}, Snapshot: s2}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	obs := installed(t, a, job(idB, version(1), rev(90)))
	p, err := MakePlan(testLayout, Request{Op: OpReconcile, Jobs: set.Jobs, Snapshot: set.Snapshot, Pages: set.Pages, Now: testNow}, obs)
	if err != nil {
		t.Fatal(err)
	}
	tombs := writtenTombstones(t, p)
	bn := job(idB).UnitName()
	tb, ok := tombs[bn]
	if !ok {
		t.Fatalf("B not removed as an orphan: %q", summary(p))
	}
	if tb.Version != 1 || tb.Seen == nil || !reflect.DeepEqual(*tb.Seen, s2) {
		t.Errorf("tombstone of B: version %d seen %+v; want version 1 seen %+v (page 2, which found B gone)", tb.Version, tb.Seen, s2)
	}
	// The update of B (version 2, tx 120), delivered after the converge.
	stale := job(idB, version(2), rev(120))
	p2, err := MakePlan(testLayout, Request{Op: OpApply, Jobs: []wire.Job{stale}, Now: testNow.Add(time.Second)},
		tombstoned(empty(), tombs))
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Stale) == 0 {
		t.Errorf("a pre-delete update of B is installed again after the converge removed B: %q", summary(p2))
	}
	withPage2 := Tombstone{Version: tb.Version, Seen: &s2, At: tb.At}
	if !withPage2.Refuses(stale, testNow.Add(time.Second)) {
		t.Errorf("control: page 2's snapshot should refuse it")
	}
}

// In a paged converge each unit is judged by the page whose id range holds
// its job: orphan removal, the tombstone's snapshot and lifting alike.
// Pages here: page 1 read at s1, page 2 (to the end) at s2; their Common
// is s1. idA < idB < idC.
func TestPagedOrphansJudgedByTheirPage(t *testing.T) {
	s1 := wire.Snapshot{Xmin: 100, Xmax: 110}
	s2 := wire.Snapshot{Xmin: 130, Xmax: 130}
	upToA := wire.PageSnapshots{{Last: idA, Snapshot: s1}, {Snapshot: s2}} // A in page 1; B, C in page 2
	upToB := wire.PageSnapshots{{Last: idB, Snapshot: s1}, {Snapshot: s2}} // A, B in page 1; C in page 2
	paged := func(pages wire.PageSnapshots, jobs ...wire.Job) Request {
		return Request{Op: OpReconcile, Jobs: jobs, Snapshot: s1.Common(s2), Pages: pages, Now: testNow}
	}
	an, bn, cn := job(idA).UnitName(), job(idB).UnitName(), job(idC).UnitName()
	hourAgo := testNow.Add(-time.Hour)
	older := wire.Snapshot{Xmin: 100, Xmax: 115} // an earlier finding: newer than page 1, older than page 2
	for _, tc := range []struct {
		name          string
		req           Request
		obs           Observed
		removed       []string // units whose timer the plan removes
		kept, stale   []string
		tombs         map[string]Tombstone // the tombstone file written; nil: none
		installsAgain []string             // units the plan writes
	}{
		{"orphan in the last page's range, written between the pages: removed, with that page's snapshot",
			paged(upToA, job(idA, rev(50))), installed(t, job(idA, rev(50)), job(idB, rev(120))),
			[]string{bn}, nil, nil, map[string]Tombstone{bn: {Version: 1, Seen: &s2, At: testNow}}, nil},
		{"orphan in the first page's range whose write it saw: removed, with the first page's snapshot",
			paged(upToB, job(idB, rev(50))), installed(t, job(idA, rev(90)), job(idB, rev(50))),
			[]string{an}, nil, nil, map[string]Tombstone{an: {Version: 1, Seen: &s1, At: testNow}}, nil},
		{"created behind the cursor (first page's range, after it was read): kept, though a later page saw the write",
			paged(upToB, job(idB, rev(50))), installed(t, job(idA, rev(120)), job(idB, rev(50))),
			nil, []string{an}, nil, nil, nil},
		{"listed by a page newer than the orphan's finding: tombstone lifted, though the pages' Common is older",
			paged(upToA, job(idA, rev(50)), job(idC, rev(90))),
			tombstoned(installed(t, job(idA, rev(50))), map[string]Tombstone{cn: {Version: 1, Seen: &older, At: hourAgo}}),
			nil, nil, nil, map[string]Tombstone{}, []string{cn}},
		{"listed by a page not newer than the finding: stale, though a later page is newer",
			paged(upToB, job(idA, rev(90)), job(idC, rev(50))),
			tombstoned(installed(t, job(idC, rev(50))), map[string]Tombstone{an: {Version: 1, Seen: &older, At: hourAgo}}),
			nil, nil, []string{an}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := MakePlan(testLayout, tc.req, tc.obs)
			if err != nil {
				t.Fatal(err)
			}
			var removed, written []string
			for _, s := range p.Steps {
				for _, n := range []string{an, bn, cn} {
					switch s.Target {
					case testLayout.unitPath(n, extTimer):
						if s.Kind == KindRemove {
							removed = append(removed, n)
						}
						if s.Kind == KindWrite {
							written = append(written, n)
						}
					}
				}
			}
			if !slices.Equal(removed, tc.removed) || !slices.Equal(written, tc.installsAgain) {
				t.Errorf("removed %q written %q, want removed %q written %q; steps %q", removed, written, tc.removed, tc.installsAgain, summary(p))
			}
			if !slices.Equal(p.Kept, tc.kept) || !slices.Equal(p.Stale, tc.stale) {
				t.Errorf("kept %q stale %q, want kept %q stale %q", p.Kept, p.Stale, tc.kept, tc.stale)
			}
			if got := writtenTombstones(t, p); !reflect.DeepEqual(got, tc.tombs) {
				t.Errorf("tombstones written\n got %+v\nwant %+v", got, tc.tombs)
			}
		})
	}
}

// snapshotFor: the covering page's snapshot for a job's unit in a paged
// set, the set's own otherwise (one read, or a name that holds no job id,
// which no page answered for).
func TestSnapshotFor(t *testing.T) {
	common := wire.Snapshot{Xmin: 100, Xmax: 110}
	s1, s2 := wire.Snapshot{Xmin: 101, Xmax: 111}, wire.Snapshot{Xmin: 130, Xmax: 130}
	pages := wire.PageSnapshots{{Last: idA, Snapshot: s1}, {Snapshot: s2}}
	for _, tc := range []struct {
		name  string
		pages wire.PageSnapshots
		unit  string
		want  wire.Snapshot
	}{
		{"one read", nil, job(idB).UnitName(), common},
		{"paged, first page", pages, job(idA).UnitName(), s1},
		{"paged, last page", pages, job(idC).UnitName(), s2},
		{"paged, a name without a job id", pages, "cron-acme-leftover", common},
		{"paged, an id not in the core's canonical form", pages, "cron-acme-2B6F1D7C-3C8E-4A57-9E0A-2F4F5C9D8E73", common},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Op: OpReconcile, Snapshot: common, Pages: tc.pages}
			if got := req.snapshotFor(tc.unit); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("snapshotFor(%s) = %+v, want %+v", tc.unit, got, tc.want)
			}
		})
	}
}
