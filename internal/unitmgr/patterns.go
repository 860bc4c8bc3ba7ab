package unitmgr

import (
	"strings"

	"github.com/hostcron/hostcron/internal/wire"
)

// maxNamedPatterns is the most units whose state is asked of systemd by
// name rather than by listing every cron unit. systemd answers
// ListUnitsByPatterns by matching every unit it holds against every
// pattern (fnmatch), then sends the matches: one pattern a unit is cheap
// on both sides for an apply of a few jobs, while listing all of them
// sends two entries per timer of the node (20,000 at 10,000 timers) for
// each single job's change; past a few dozen patterns the matching costs
// more than the listing.
const maxNamedPatterns = 32

// listPatterns are the patterns that list what systemd holds of units:
// one per unit ("cron-acme-1.*": its timer and service) when they are few
// and all plain, else every cron unit. A pattern may match more than its
// unit's files (a name given to a removal may contain a ".", so
// "cron-a.*" also matches "cron-a.b.timer"); that is harmless, since the
// plan looks units up by exact name. A name that is not plain (a glob or
// escape character, a NUL that D-Bus refuses to carry, anything a unit
// name cannot hold: validUnitName lets through all but a slash and NUL)
// is listed with all the others, so the answer never misses a unit and
// never fails for one odd name.
func listPatterns(units []string) []string {
	all := []string{wire.UnitPrefix + "*"}
	if len(units) == 0 || len(units) > maxNamedPatterns {
		return all
	}
	out := make([]string, 0, len(units))
	for _, u := range units {
		if !plainUnitName(u) {
			return all
		}
		out = append(out, u+".*")
	}
	return out
}

// plainUnitName: a cron unit's name made only of the characters systemd
// allows in unit names without escaping, none of which fnmatch treats
// specially.
func plainUnitName(n string) bool {
	if !strings.HasPrefix(n, wire.UnitPrefix) || len(n) == len(wire.UnitPrefix) {
		return false
	}
	for _, c := range []byte(n) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '@':
		default:
			return false
		}
	}
	return true
}
