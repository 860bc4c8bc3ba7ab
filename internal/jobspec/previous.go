package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
)

// A run's outcome hook (cron-outcome) holds the run's record, which the
// tenant can write, against the job's spec: a scheduled slot must be a fire
// time of the schedule the run started under. systemd 252 removes the
// service's credentials (the copy of the spec the run started with) before
// ExecStopPost, so the hook sees only the spec file, which a schedule
// change or a delete during the run has replaced. The node agent therefore
// keeps the spec a change replaces, in PreviousDir beside the specs, as
// long as a run of it may still report (KeepPrevious).

// PreviousDir is the directory of kept specs, inside the spec dir: a
// directory, so that listings of the spec dir's own files never see them.
const PreviousDir = "previous"

// KeepPrevious is how long a replaced spec is kept: longer than the
// hook's MaxRunAge (73 h), the oldest slot it accepts.
const KeepPrevious = 74 * time.Hour

// MaxPrevious bounds the kept specs of one unit (an edit storm of schedule
// changes); the newest are kept.
const MaxPrevious = 32

// NeedsKeeping reports whether a run started under old can still be told
// from its record once old is replaced by next (nil: removed). The
// schedule and time zone decide which slots a record may name, and the
// overlap policy whether it may say the next slot superseded it (only a
// cancel_previous run stops itself, and the hook believes that only of a
// run whose own spec says cancel_previous): a run of cancel_previous
// still going when the policy changes stops at the next slot, and judged
// by its successor's policy it would be reported a failure, counted
// against the tenant. A spec replaced for any other reason (command,
// limits, version) judges the same records as its successor.
func NeedsKeeping(old Spec, next *Spec) bool {
	return next == nil || old.Schedule != next.Schedule || old.Timezone != next.Timezone ||
		old.OverlapPolicy.OrSkip() != next.OverlapPolicy.OrSkip()
}

// KeptName is the file name of a kept spec: the unit, then its version.
func KeptName(unit string, version int64) string {
	return unit + ".v" + strconv.FormatInt(version, 10) + ".json"
}

// KeepReplaced keeps the spec at path (of unit) before it is replaced by
// next, or removed when next is nil, if a run of it needs it
// (NeedsKeeping). A spec that is missing or does not decode is nothing to
// keep. It does not prune: PruneKept does, once per batch of changes,
// since a prune reads the whole directory of kept specs (once per kept
// spec, a delete of 10,000 jobs read that directory 10,000 times, at up
// to 10,000 entries each: minutes).
func KeepReplaced(path, unit string, next []byte) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("keep replaced spec: %w", err)
	}
	var old Spec
	if json.Unmarshal(b, &old) != nil {
		return nil
	}
	var nextSpec *Spec
	if next != nil {
		nextSpec = new(Spec)
		if json.Unmarshal(next, nextSpec) != nil {
			nextSpec = nil // judged as a removal: keep the old one
		}
	}
	dir := filepath.Join(filepath.Dir(path), PreviousDir)
	if NeedsKeeping(old, nextSpec) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("keep replaced spec: %w", err)
		}
		// The kept copy serves the outcome hook (which version, which
		// schedule), never a run: without the job's environment, so its
		// secrets leave the node with the job, not two days later.
		kept := b
		if len(old.Environment) > 0 {
			old.Environment = nil
			if kept, err = old.Marshal(); err != nil {
				return fmt.Errorf("keep replaced spec: %w", err)
			}
		}
		if err := atomicfile.Write(filepath.Join(dir, KeptName(unit, old.Version)), kept, 0o600); err != nil {
			return fmt.Errorf("keep replaced spec: %w", err)
		}
	}
	return nil
}

// PruneKept drops the kept specs in specDir past KeepPrevious or beyond
// their unit's MaxPrevious newest versions.
func PruneKept(specDir string, now time.Time) error {
	return prune(filepath.Join(specDir, PreviousDir), now)
}

// Kept lists the kept specs of unit in specDir.
func Kept(specDir, unit string) ([]string, error) {
	return filepath.Glob(filepath.Join(specDir, PreviousDir, unit+".v*.json"))
}

// keptFile is one kept spec as prune sees it.
type keptFile struct {
	Name    string
	Unit    string
	Version int64
	ModTime time.Time // when it was kept
}

// prune removes the kept specs expired names.
func prune(dir string, now time.Time) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("prune kept specs: %w", err)
	}
	var files []keptFile
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, parseKept(e.Name(), info.ModTime()))
	}
	var errs []error
	for _, name := range expired(files, now) {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// parseKept reads unit and version from a kept spec's name; a name that is
// not one (a temp file of an interrupted write) has no unit.
func parseKept(name string, mod time.Time) keptFile {
	f := keptFile{Name: name, ModTime: mod}
	base, ok := strings.CutSuffix(name, ".json")
	i := strings.LastIndex(base, ".v")
	if !ok || i <= 0 {
		return f
	}
	v, err := strconv.ParseInt(base[i+2:], 10, 64)
	if err != nil {
		return f
	}
	f.Unit, f.Version = base[:i], v
	return f
}

// expired names the kept files to remove: older than KeepPrevious, or
// beyond the MaxPrevious newest versions of their unit.
func expired(files []keptFile, now time.Time) []string {
	byUnit := map[string][]keptFile{}
	var out []string
	for _, f := range files {
		if now.Sub(f.ModTime) > KeepPrevious {
			out = append(out, f.Name)
			continue
		}
		byUnit[f.Unit] = append(byUnit[f.Unit], f)
	}
	for _, kept := range byUnit {
		sort.Slice(kept, func(i, j int) bool { return kept[i].Version > kept[j].Version })
		for _, f := range kept[min(MaxPrevious, len(kept)):] {
			out = append(out, f.Name)
		}
	}
	sort.Strings(out)
	return out
}
