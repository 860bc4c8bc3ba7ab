package wire

import (
	"slices"
	"testing"
)

// Common sees a write exactly when both snapshots do: the rule a node's
// orphan decisions stand on when its set came in pages (a unit goes only
// if the page that found it absent had seen its write).
func TestSnapshotCommonSeesWhatBothSee(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b Snapshot
		want Snapshot
	}{
		{"same", Snapshot{Xmin: 100, Xmax: 105, Xip: []uint64{102}}, Snapshot{Xmin: 100, Xmax: 105, Xip: []uint64{102}},
			Snapshot{Xmin: 100, Xmax: 105, Xip: []uint64{102}}},
		// A later page's snapshot: it saw 102 and 104 finish; the earlier
		// one had 102 in progress and 104 not started.
		{"later page", Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{100, 102}}, Snapshot{Xmin: 103, Xmax: 110, Xip: []uint64{103, 107}},
			Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{100, 102, 103}}},
		{"order does not matter", Snapshot{Xmin: 103, Xmax: 110, Xip: []uint64{103, 107}}, Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{100, 102}},
			Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{100, 102, 103}}},
		// Not ordered by time (never on one primary, but Common does not
		// rely on it): the lower xmax and the in-progress lists of both.
		{"crossed", Snapshot{Xmin: 100, Xmax: 120, Xip: []uint64{110}}, Snapshot{Xmin: 105, Xmax: 115, Xip: []uint64{105, 112}},
			Snapshot{Xmin: 100, Xmax: 115, Xip: []uint64{105, 110, 112}}},
		{"zero sees nothing", Snapshot{}, Snapshot{Xmin: 100, Xmax: 105}, Snapshot{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a.Common(tc.b)
			if got.Xmin != tc.want.Xmin || got.Xmax != tc.want.Xmax || !slices.Equal(got.Xip, tc.want.Xip) {
				t.Errorf("Common = %+v, want %+v", got, tc.want)
			}
			for rev := uint64(0); rev < 130; rev++ {
				if got.Sees(rev) != (tc.a.Sees(rev) && tc.b.Sees(rev)) {
					t.Errorf("Common sees %d: %v; a: %v, b: %v", rev, got.Sees(rev), tc.a.Sees(rev), tc.b.Sees(rev))
				}
			}
		})
	}
}

// A report is cut list by list, the cut counted; a short one is unchanged.
func TestNodeReportBounded(t *testing.T) {
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = string(rune('a' + i))
		}
		return out
	}
	r := NodeReport{Written: names(5), Specs: names(3), Enabled: names(2), Failed: names(4), Reloads: 1, Desired: 9}
	got := r.Bounded(3)
	if len(got.Written) != 3 || got.Written[2] != "c" || len(got.Specs) != 3 || len(got.Enabled) != 2 || len(got.Failed) != 3 {
		t.Errorf("bounded %+v", got)
	}
	if got.Omitted != 2+1 || got.Reloads != 1 || got.Desired != 9 {
		t.Errorf("omitted %d (want 3), reloads %d, desired %d", got.Omitted, got.Reloads, got.Desired)
	}
	if len(r.Written) != 5 {
		t.Error("Bounded changed the report it was called on")
	}
	if &got.Written[0] == &r.Written[0] || cap(got.Written) != 3 {
		t.Error("a cut list shares the whole list's backing array: the report would hold every name")
	}
	if same := r.Bounded(10); same.Omitted != 0 || len(same.Written) != 5 {
		t.Errorf("a short report was cut: %+v", same)
	}
}
