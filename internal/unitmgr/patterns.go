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
// one per unit ("cron-acme-1.*": its timer and service, nothing of
// another unit, since "." ends a unit's name) when they are few and all
// plain, else every cron unit. A name with a glob character (which a
// valid unit name never has; validUnitName lets through anything without
// a slash) is listed with all the others, so the answer never misses a
// unit.
func listPatterns(units []string) []string {
	all := []string{wire.UnitPrefix + "*"}
	if len(units) == 0 || len(units) > maxNamedPatterns {
		return all
	}
	out := make([]string, 0, len(units))
	for _, u := range units {
		if strings.ContainsAny(u, `*?[]\`) {
			return all
		}
		out = append(out, u+".*")
	}
	return out
}
