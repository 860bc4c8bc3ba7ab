package schedule

import "time"

// Gap is a wall fire time that does not exist in the zone: clocks jumped
// over it, and systemd skips it (see Next).
type Gap struct {
	Wall string    // local wall time, as DSTNote.Wall
	At   time.Time // the instant the clocks jumped (the gap's place in time)
}

// Gaps lists the wall fire times skipped by the zone's forward clock
// changes in [from, to), every one (DSTNotes caps its notes per change;
// an account of slots must not). It walks each change's wall window with
// the wall search Next uses, as DSTNotes does.
func (s *Schedule) Gaps(from, to time.Time) []Gap {
	var out []Gap
	// zoneChanges steps a day at a time from `from`: start a day early so
	// a change just after from is not missed, and keep only those in range.
	for _, c := range clockChanges(s.loc, from.Add(-24*time.Hour), to) {
		if !c.forward() || c.at.Before(from) || !c.at.Before(to) {
			continue
		}
		out = append(out, s.changeGaps(c)...)
	}
	return out
}

// changeGaps lists the fire times in one forward change's wall window that
// resolve to no instant.
func (s *Schedule) changeGaps(c clockChange) []Gap {
	var out []Gap
	w := civil(c.wallFrom.Add(-time.Second))
	for {
		var ok bool
		if w, ok = s.nextWall(w); !ok || !naiveOf(w).Before(c.wallTil) {
			return out
		}
		if _, exists := resolve(w, s.loc, c.at.Add(-48*time.Hour)); !exists {
			out = append(out, Gap{Wall: formatWall(w), At: c.at})
		}
	}
}

// Location is the schedule's zone.
func (s *Schedule) Location() *time.Location { return s.loc }
