package unitmgr

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// A tombstone remembers, for a while, that the node removed a job's units
// on the core's word (a delete, or an orphan by a converge's snapshot), so
// a message about the job that was on its way before that word (an
// ApplyJobs queued behind the removal, a converge snapshot read before the
// delete) cannot install it again. See docs/semantics.md, "Orphans,
// snapshots and tombstones".
type Tombstone struct {
	// Version: a job at or below it is older than the removal. A delete
	// records the delete-marked row's version, which is above every
	// version the core ever sent to be installed.
	Version int64 `json:"version"`
	// Seen (orphan removals) is the snapshot that found the job gone: a
	// job written by a transaction this snapshot saw is older than the
	// removal, whatever its version.
	Seen *wire.Snapshot `json:"seen,omitempty"`
	At   time.Time      `json:"at"` // when it was recorded (the node's clock)
}

// Tombstones are kept this long: far beyond any activity's deadline or
// the age a signed task may have, so any message older than a removal
// arrives while its tombstone is there.
const TombstoneTTL = 24 * time.Hour

// MaxTombstones bounds the tombstone file; past it the oldest go first.
const MaxTombstones = 10000

// tombstoneFile names the file in the spec dir (root-only, beside the
// dirty marker) that holds the tombstones by unit name.
const tombstoneFile = ".tombstones.json"

// TombstonePath is where the node's tombstones are kept.
func (l Layout) TombstonePath() string { return filepath.Join(l.Paths.SpecDir, tombstoneFile) }

// live reports whether the tombstone still counts at now.
func (t Tombstone) live(now time.Time) bool { return now.Sub(t.At) < TombstoneTTL }

// Refuses reports whether j is older than the removal t records.
func (t Tombstone) Refuses(j wire.Job, now time.Time) bool {
	if !t.live(now) {
		return false
	}
	return j.Version <= t.Version || (t.Seen != nil && t.Seen.Sees(j.Rev))
}

// merge is t with a newer removal of the same unit folded in: the higher
// version, the newer snapshot if there is one.
func (t Tombstone) merge(newer Tombstone) Tombstone {
	out := newer
	out.Version = max(t.Version, newer.Version)
	if out.Seen == nil {
		out.Seen = t.Seen
	}
	return out
}

// adds reports whether recording newer changes what t refuses.
func (t Tombstone) adds(newer Tombstone) bool {
	return newer.Version > t.Version || newer.Seen != nil
}

// decodeTombstones reads the tombstone file's content.
func decodeTombstones(b []byte) (map[string]Tombstone, error) {
	out := map[string]Tombstone{}
	if len(b) == 0 {
		return out, nil
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("decode tombstones: %w", err)
	}
	return out, nil
}

// tombstoneStep records the tombstones of the plan's removals, with the
// live ones the node has, in one atomic write. It is the plan's first
// step: a crash in the middle of a removal leaves the tombstone, never a
// removed unit without one. No removal of the core's, no write.
func tombstoneStep(l Layout, intents []intent, obs Observed, now time.Time) (Step, bool) {
	set := map[string]Tombstone{}
	for n, t := range obs.Tombstones {
		if t.live(now) {
			set[n] = t
		}
	}
	var added []string
	for _, in := range intents {
		if in.tomb == nil {
			continue
		}
		old, ok := set[in.name]
		if ok && !old.adds(*in.tomb) {
			continue // a retried delete: the tombstone is there
		}
		set[in.name] = old.merge(*in.tomb)
		added = append(added, in.name)
	}
	if len(added) == 0 {
		return Step{}, false
	}
	b, err := json.MarshalIndent(prune(set), "", "  ")
	if err != nil {
		return Step{}, false // a map of plain values always encodes
	}
	return Step{Kind: KindTombstone, Target: l.TombstonePath(), Content: append(b, '\n'), Mode: 0o600,
		Reason: fmt.Sprintf("remember %d removed job(s) for %s: %s", len(added), TombstoneTTL, abbreviate(added, 3))}, true
}

// prune keeps the newest MaxTombstones.
func prune(set map[string]Tombstone) map[string]Tombstone {
	if len(set) <= MaxTombstones {
		return set
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := set[names[i]], set[names[j]]
		if !a.At.Equal(b.At) {
			return a.At.After(b.At)
		}
		return names[i] < names[j]
	})
	out := make(map[string]Tombstone, MaxTombstones)
	for _, n := range names[:MaxTombstones] {
		out[n] = set[n]
	}
	return out
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
