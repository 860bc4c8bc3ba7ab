package schedule

import (
	"fmt"
	"time"
)

// DSTNote kinds.
const (
	DSTGap    = "dst_gap"    // the wall time does not exist: the run is skipped
	DSTRepeat = "dst_repeat" // the wall time exists twice: the job runs once
)

// maxNotesPerChange bounds the notes of one clock change: an every-minute
// job has 60 affected wall times in a one-hour change, which one note's
// count says better than 60 notes.
const maxNotesPerChange = 5

// DSTNote is one fire time that a clock change affects.
type DSTNote struct {
	Kind    string    // DSTGap or DSTRepeat
	Wall    string    // local wall time, "2027-03-28T02:30" (":SS" added when not 0)
	At      time.Time // DSTRepeat: the one instant it runs; DSTGap: zero
	Message string
}

// DSTNotes parses expr in tz and lists its fire times in the zone's clock
// changes from `from` for the given number of months.
func DSTNotes(expr, tz string, from time.Time, months int) ([]DSTNote, error) {
	s, err := Parse(expr, tz)
	if err != nil {
		return nil, fmt.Errorf("dst notes for %q in %q: %w", expr, tz, err)
	}
	return s.DSTNotes(from, months), nil
}

// DSTNotes lists, for each of the zone's clock changes from `from` for the
// given number of months, the wall fire times that do not exist (skipped)
// or exist twice (run once, at the instant Next gives). Only the wall
// window of each change is walked, so a year costs a few hundred offset
// look-ups. Never nil.
func (s *Schedule) DSTNotes(from time.Time, months int) []DSTNote {
	notes := []DSTNote{}
	for _, c := range clockChanges(s.loc, from, from.AddDate(0, months, 0)) {
		notes = append(notes, s.changeNotes(c)...)
	}
	return notes
}

// clockChange is one change of a zone's UTC offset.
type clockChange struct {
	at                time.Time // first instant of the new offset
	before, after     int       // offsets in seconds east of UTC
	wallFrom, wallTil time.Time // the affected wall window [from, til), as naive UTC times
}

// forward reports a gap (wall time jumps ahead) rather than a repeat.
func (c clockChange) forward() bool { return c.after > c.before }

// clockChanges finds the zone's offset changes in [from, to): zoneChanges
// locates each to the minute, and bisection to the nanosecond pins the
// instant, as the wall window must be exact.
func clockChanges(loc *time.Location, from, to time.Time) []clockChange {
	var out []clockChange
	for _, hi := range zoneChanges(loc, from, to) {
		lo := hi.Add(-time.Minute - time.Second)
		_, before := lo.In(loc).Zone()
		for hi.Sub(lo) > time.Nanosecond {
			mid := lo.Add(hi.Sub(lo) / 2)
			if _, o := mid.In(loc).Zone(); o == before {
				lo = mid
			} else {
				hi = mid
			}
		}
		_, after := hi.In(loc).Zone()
		c := clockChange{at: hi, before: before, after: after}
		// The gap's walls run from the old clock at the change to the new
		// one; a repeat's from the new clock back to the old.
		oldWall, newWall := naiveWall(hi, before), naiveWall(hi, after)
		if c.forward() {
			c.wallFrom, c.wallTil = oldWall, newWall
		} else {
			c.wallFrom, c.wallTil = newWall, oldWall
		}
		out = append(out, c)
	}
	return out
}

// naiveWall is the wall clock of t at offset off, as a UTC time.
func naiveWall(t time.Time, off int) time.Time {
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// changeNotes lists the fire times in one change's wall window, using
// nextWall, the wall-time search Next itself uses.
func (s *Schedule) changeNotes(c clockChange) []DSTNote {
	var notes []DSTNote
	more := 0
	w := civil(c.wallFrom.Add(-time.Second))
	for {
		var ok bool
		if w, ok = s.nextWall(w); !ok || !naiveOf(w).Before(c.wallTil) {
			break
		}
		if len(notes) == maxNotesPerChange {
			more++
			continue
		}
		if note, ok := s.noteFor(w, c); ok {
			notes = append(notes, note)
		}
	}
	if more > 0 {
		last := &notes[len(notes)-1]
		last.Message += fmt.Sprintf(" (and %d more fire times in the same change)", more)
	}
	return notes
}

func naiveOf(w wallTime) time.Time {
	return w.date.Add(time.Duration(w.hour)*time.Hour + time.Duration(w.min)*time.Minute + time.Duration(w.sec)*time.Second)
}

// noteFor describes one affected wall time. Which instant runs is asked of
// Next from just before the wall time's first instant, so the note says
// what the scheduler does; ok is false if Next disagrees with the window
// (it does not, but a note must not claim what did not happen).
func (s *Schedule) noteFor(w wallTime, c clockChange) (DSTNote, bool) {
	wall := formatWall(w)
	zone := ZoneName(s.loc)
	if c.forward() {
		if _, exists := resolve(w, s.loc, c.at.Add(-48*time.Hour)); exists {
			return DSTNote{}, false
		}
		return DSTNote{Kind: DSTGap, Wall: wall, Message: fmt.Sprintf(
			"%s does not exist in %s: clocks go forward from %s to %s, so this run is skipped",
			wall, zone, clockOf(c.wallFrom), clockOf(c.wallTil))}, true
	}
	first, ok := resolve(w, s.loc, c.at.Add(-48*time.Hour))
	if !ok {
		return DSTNote{}, false
	}
	at := s.Next(first.Add(-time.Second))
	if !at.Equal(first) {
		return DSTNote{}, false
	}
	return DSTNote{Kind: DSTRepeat, Wall: wall, At: at, Message: fmt.Sprintf(
		"%s occurs twice in %s: clocks go back from %s to %s; the job runs once, at the first %s (%s, %s UTC)",
		wall, zone, clockOf(c.wallTil), clockOf(c.wallFrom), clockOf(naiveOf(w)),
		at.Format("-07:00"), at.UTC().Format("15:04"))}, true
}

func formatWall(w wallTime) string {
	t := naiveOf(w)
	if w.sec != 0 {
		return t.Format("2006-01-02T15:04:05")
	}
	return t.Format("2006-01-02T15:04")
}

func clockOf(naive time.Time) string {
	if naive.Second() != 0 {
		return naive.Format("15:04:05")
	}
	return naive.Format("15:04")
}
