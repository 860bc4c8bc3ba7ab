package wire

import "errors"

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
}
