package wire

import "testing"

// For finds the one page that answered for an id: page i of a keyset read
// holds (Last of page i-1, its own Last], the first from the lowest id,
// the last (Last "") to the end. A wrong page would judge an orphan by a
// read that never looked at its id.
func TestPageSnapshotsFor(t *testing.T) {
	const (
		id1 = "00000000-0000-4000-8000-000000000001"
		id2 = "00000000-0000-4000-8000-000000000002"
		id3 = "00000000-0000-4000-8000-000000000003"
		id4 = "00000000-0000-4000-8000-000000000004"
		id5 = "00000000-0000-4000-8000-000000000005"
		low = "00000000-0000-0000-0000-000000000000"
		top = "ffffffff-ffff-ffff-ffff-ffffffffffff"
	)
	s1, s2, s3 := Snapshot{Xmin: 100, Xmax: 110}, Snapshot{Xmin: 120, Xmax: 125}, Snapshot{Xmin: 130, Xmax: 130}
	three := PageSnapshots{{Last: id2, Snapshot: s1}, {Last: id4, Snapshot: s2}, {Snapshot: s3}}
	for _, tc := range []struct {
		name  string
		pages PageSnapshots
		id    string
		want  Snapshot
		ok    bool
	}{
		{"first page, below its last id", three, id1, s1, true},
		{"first page, the lowest id", three, low, s1, true},
		{"first page's last id: on the boundary, its own page", three, id2, s1, true},
		{"just after the first boundary: the second page", three, id3, s2, true},
		{"second page's last id", three, id4, s2, true},
		{"last page, after the last cursor", three, id5, s3, true},
		{"last page, the highest id", three, top, s3, true},
		{"empty last page holds everything after the cursor", PageSnapshots{{Last: id2, Snapshot: s1}, {Snapshot: s2}}, id3, s2, true},
		{"single page holds every id", PageSnapshots{{Snapshot: s1}}, id5, s1, true},
		{"single empty page (empty shard) holds every id", PageSnapshots{{Snapshot: s2}}, low, s2, true},
		{"no pages: a set read in one snapshot", nil, id1, Snapshot{}, false},
		{"pages that stop short of the end hold nothing after them", PageSnapshots{{Last: id2, Snapshot: s1}}, id3, Snapshot{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.pages.For(tc.id)
			if ok != tc.ok || got.Xmin != tc.want.Xmin || got.Xmax != tc.want.Xmax {
				t.Errorf("For(%s) = %+v, %v; want %+v, %v", tc.id, got, ok, tc.want, tc.ok)
			}
		})
	}
}
