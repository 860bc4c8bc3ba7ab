package unitmgr

import (
	"encoding/json"
	"fmt"
	"math"
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
	// Deleted: the core deleted the job (RemoveUnits), not only a
	// converge found it gone. A delete is final, so only an operator lifts
	// its tombstone; an orphan's (Seen, not Deleted) is lifted by a
	// converge whose newer snapshot lists the job (LiftedBy).
	Deleted bool      `json:"deleted,omitempty"`
	At      time.Time `json:"at"` // when it was recorded (the node's clock)
}

// AnyVersion is the Version of a tombstone that refuses every version: a
// delete that did not say its version.
const AnyVersion int64 = math.MaxInt64

// Tombstones are kept this long: far beyond any activity's deadline or
// the age a signed task may have (max_age, at most trust.MaxMaxAge), so
// any message older than a removal arrives while its tombstone is there.
const TombstoneTTL = 24 * time.Hour

// MaxTombstones bounds the tombstone file; past it the oldest go first.
const MaxTombstones = 10000

// MaxTombstonesPerTenant bounds one tenant's share of the file, so a
// tenant that churns through jobs evicts its own oldest tombstones, not
// other tenants' fresh ones. Twice the most jobs a tenant may have
// (quota.MaxJobsCeiling, 1000): a tenant deleting every job it has, twice
// within the TTL, still keeps them all.
const MaxTombstonesPerTenant = 2000

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

// LiftedBy reports whether a converge whose snapshot is s, listing the
// job, proves this orphan tombstone wrong. s must be strictly newer than
// the snapshot that found the job gone: s.Xmin >= Seen.Xmax, i.e. every
// transaction Seen had not seen finish had finished for s. A snapshot taken
// at or before Seen has s.Xmin <= Seen.Xmin <= Seen.Xmax, equal only when
// nothing ran between them: then both show the same rows, and s cannot
// list what Seen lacked. Since the set never holds a job being deleted and
// a delete is final, a job such a snapshot lists is alive. A delete's
// tombstone is never lifted so: no snapshot says when the delete
// committed.
func (t Tombstone) LiftedBy(s wire.Snapshot) bool {
	return !t.Deleted && t.Seen != nil && s.Xmax > 0 && s.Xmin >= t.Seen.Xmax
}

// merge is t with a newer removal of the same unit folded in: the higher
// version, the newer snapshot if there is one, deleted if either was.
func (t Tombstone) merge(newer Tombstone) Tombstone {
	out := newer
	out.Version = max(t.Version, newer.Version)
	if out.Seen == nil {
		out.Seen = t.Seen
	}
	out.Deleted = t.Deleted || newer.Deleted
	return out
}

// adds reports whether recording newer changes what t refuses.
func (t Tombstone) adds(newer Tombstone) bool {
	return newer.Version > t.Version || newer.Seen != nil || (newer.Deleted && !t.Deleted)
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

// tombstoneSteps record the tombstones of the plan's removals and drop
// the ones it lifts, with the other live ones the node has, in one atomic
// write. They are the plan's first steps: a crash in the middle of a
// removal leaves the tombstone, never a removed unit without one. No
// removal of the core's and nothing lifted, no write. An unreadable file
// is first set aside (never overwritten: what it held may still be read
// by hand), named after now.
func tombstoneSteps(l Layout, intents []intent, lift []string, obs Observed, now time.Time) []Step {
	set := map[string]Tombstone{}
	for n, t := range obs.Tombstones {
		if t.live(now) {
			set[n] = t
		}
	}
	var added, lifted []string
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
	for _, n := range lift {
		if _, ok := set[n]; ok {
			delete(set, n)
			lifted = append(lifted, n)
		}
	}
	if len(added) == 0 && len(lifted) == 0 {
		return nil
	}
	b, err := json.MarshalIndent(prune(set), "", "  ")
	if err != nil {
		return nil // a map of plain values always encodes
	}
	var why []string
	if len(added) > 0 {
		why = append(why, fmt.Sprintf("remember %d removed job(s) for %s: %s", len(added), TombstoneTTL, abbreviate(added, 3)))
	}
	if len(lifted) > 0 {
		why = append(why, fmt.Sprintf("lift %d tombstone(s) of jobs proven alive: %s", len(lifted), abbreviate(lifted, 3)))
	}
	var out []Step
	if obs.TombstonesUnreadable {
		out = append(out, Step{Kind: KindSetAside, Target: l.TombstonePath() + ".corrupt-" + now.UTC().Format("20060102T150405Z"),
			Reason: "tombstone file unreadable: kept aside, not overwritten"})
	}
	return append(out, Step{Kind: KindTombstone, Target: l.TombstonePath(), Content: append(b, '\n'), Mode: 0o600,
		Reason: strings.Join(why, "; ")})
}

// prune keeps each tenant's newest MaxTombstonesPerTenant, then the
// newest MaxTombstones.
func prune(set map[string]Tombstone) map[string]Tombstone {
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
	out := make(map[string]Tombstone, min(len(set), MaxTombstones))
	perTenant := map[string]int{}
	for _, n := range names {
		if len(out) == MaxTombstones {
			break
		}
		tenant := unitTenant(n)
		if perTenant[tenant] == MaxTombstonesPerTenant {
			continue
		}
		perTenant[tenant]++
		out[n] = set[n]
	}
	return out
}

// unitTenant is the tenant part of cron-{tenant}-{id}; a name of another
// shape is its own tenant.
func unitTenant(name string) string {
	if tenant, _, ok := wire.SplitUnitName(name); ok {
		return tenant
	}
	return name
}

func abbreviate(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
