package wire

import (
	"errors"
	"slices"
)

// ErrRevisionsAhead: a desired set holds a job whose revision its own
// snapshot has not seen, which a committed row cannot have unless the
// transaction counter went back (a logical dump and restore, or a
// logical-replication upgrade, into a cluster whose xids start lower).
// Nodes would then judge orphans and tombstones by a counter that no
// longer orders writes, so no converge runs until the operator fixes it
// (docs/semantics.md, "Orphans, snapshots and tombstones").
var ErrRevisionsAhead = errors.New("job revisions are ahead of the transaction counter")

// Snapshot is the PostgreSQL snapshot (pg_current_snapshot()) a converge's
// desired set was read in. A transaction id below Xmin had finished when
// the snapshot was taken; one at or above Xmax had not started; one in
// between had finished unless it is listed in Xip (in progress). The zero
// Snapshot sees nothing.
type Snapshot struct {
	Xmin uint64   `json:"xmin"`
	Xmax uint64   `json:"xmax"`
	Xip  []uint64 `json:"xip,omitempty"`
}

// Sees reports whether a write by transaction rev had finished when the
// snapshot was taken, so the snapshot reflects it (pg_visible_in_snapshot
// for a committed transaction; nodes only ever get committed writes). A
// job unknown to the snapshot whose installed revision it sees was
// therefore removed from the desired set before the snapshot; one it does
// not see may have been created after it.
func (s Snapshot) Sees(rev uint64) bool {
	switch {
	case rev < s.Xmin:
		return true
	case rev >= s.Xmax:
		return false
	}
	for _, x := range s.Xip {
		if x == rev {
			return false
		}
	}
	return true
}

// DesiredSet is a shard's desired jobs as one converge reads them, with
// the snapshot they were read in.
type DesiredSet struct {
	Jobs     []Job    `json:"jobs"`
	Snapshot Snapshot `json:"snapshot"`
	// Pages (a set the node read in pages, desiredset.Assemble) are the
	// pages' id ranges with their own snapshots; Snapshot is then their
	// Common. Never sent: only the node that read the pages has them, and
	// a set read in one snapshot (a pre-paging converge) has none.
	Pages PageSnapshots `json:"-"`
}

// PageSnapshot is one page of a paged desired set: the snapshot it was
// read in and the last id of the id range it answers for, its Next (""
// for the last page, whose range runs to the end). The first page's range
// starts at the lowest id, each later one right after the previous Last.
type PageSnapshot struct {
	Last     string
	Snapshot Snapshot
}

// PageSnapshots are a paged set's pages, in order.
type PageSnapshots []PageSnapshot

// For returns the snapshot of the page whose id range holds id: the one
// read that answered whether the job with that id is in the set (keyset
// pages: a page after cursor c with Next n listed every id in (c, n] its
// snapshot showed, and the last page every id after c). An id on a
// boundary is its page's Last, so belongs to that page. false if no page
// holds it (no pages: a set read in one snapshot).
func (ps PageSnapshots) For(id string) (Snapshot, bool) {
	for _, p := range ps {
		if p.Last == "" || id <= p.Last {
			return p.Snapshot, true
		}
	}
	return Snapshot{}, false
}

// Common is the snapshot that sees exactly what both s and o see: the
// lower xmin and xmax, and every transaction either had in progress below
// that xmax. A transaction between the two xmins that s saw finish is in
// o's Xip if o did not, and Xip never holds one below its own xmin, so the
// union of the two lists is exact. A set read in pages, each in its own
// snapshot, has the Common of them all as its Snapshot; its jobs are
// judged by their own page's (PageSnapshots.For), which sees at least as
// much (docs/semantics.md, "Paged desired sets"). The zero Snapshot sees
// nothing, and so does its Common with anything.
func (s Snapshot) Common(o Snapshot) Snapshot {
	out := Snapshot{Xmin: min(s.Xmin, o.Xmin), Xmax: min(s.Xmax, o.Xmax)}
	seen := map[uint64]bool{}
	for _, x := range append(append([]uint64(nil), s.Xip...), o.Xip...) {
		if x >= out.Xmin && x < out.Xmax && !seen[x] {
			seen[x] = true
			out.Xip = append(out.Xip, x)
		}
	}
	slices.Sort(out.Xip)
	return out
}

// DesiredPage is one page of a node's desired set, as GET
// /internal/v1/nodes/{node}/desired-jobs answers it: jobs in id order
// after the page's cursor, read in Snapshot. Next, if not empty, is the
// last id of the page: the cursor of the next page; empty, the set ends
// here.
type DesiredPage struct {
	Jobs     []Job    `json:"jobs"`
	Snapshot Snapshot `json:"snapshot"`
	Next     string   `json:"next,omitempty"`
}

// Page sizes of a desired set: a node asks for DesiredPageSize jobs a
// page, the core serves at most MaxDesiredPageSize (about 450 KB of JSON
// at 454 B a job, far below any limit).
const (
	DesiredPageSize    = 500
	MaxDesiredPageSize = 1000
)

// DesiredSetRef is what a converge hands a node instead of its desired
// set: which node's set to read from the core (the node's own: the core
// refuses any other). The node reads the set in pages itself, so the
// Temporal payload stays this small whatever the shard's size.
type DesiredSetRef struct {
	NodeID string `json:"node_id"`
}
