package schedule

import (
	"sort"
	"time"
)

// searchYears bounds the search for the next matching day. Weekdays and
// dates repeat with the 400-year Gregorian cycle (146,097 days, a whole
// number of weeks), so every schedule that can fire at all fires within it;
// a day-of-month AND day-of-week schedule can wait decades (Sunday 29
// February: 2032, then 2060).
const searchYears = 400

// maxLookback bounds Prev; a Duration cannot span the whole cycle.
const maxLookback = 200 * 366 * 24 * time.Hour

// Next returns the first fire time strictly after t, as systemd computes it
// for the schedule's OnCalendar values, or the zero Time if there is none
// within the search horizon.
//
// systemd walks wall-clock time in the zone forward from the wall time of
// the base instant. A wall time that does not exist (spring forward) is
// skipped. A wall time that exists twice (fall back) fires at the earliest
// of its instants that lies after the base: walking forward from the first
// pass through a repeated hour skips the second pass, so a daily job fires
// once on that day.
func (s *Schedule) Next(t time.Time) time.Time {
	wall := civil(t.In(s.loc))
	for i := 0; i < 400000; i++ { // hard bound; a real search ends far sooner
		var ok bool
		if wall, ok = s.nextWall(wall); !ok {
			return time.Time{}
		}
		if at, ok := resolve(wall, s.loc, t); ok {
			return at
		}
	}
	return time.Time{}
}

// NextN returns the next n fire times after t.
func (s *Schedule) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// Prev returns the latest fire time at or before t (zero if none within the
// search horizon). A runner uses it to name the occurrence a timer fired for.
func (s *Schedule) Prev(t time.Time) time.Time {
	for lookback := 2 * time.Second; lookback < maxLookback; lookback *= 4 {
		at := s.Next(t.Add(-lookback))
		if at.IsZero() || at.After(t) {
			continue
		}
		for n := s.Next(at); !n.IsZero() && !n.After(t); n = s.Next(n) {
			at = n
		}
		return at
	}
	return time.Time{}
}

// wallTime is a civil date and time to the second, as the cron fields see it.
type wallTime struct {
	date time.Time // midnight UTC of the civil day; UTC keeps day arithmetic free of DST
	hour int
	min  int
	sec  int
}

func civil(t time.Time) wallTime {
	y, m, d := t.Date()
	return wallTime{date: time.Date(y, m, d, 0, 0, 0, 0, time.UTC), hour: t.Hour(), min: t.Minute(), sec: t.Second()}
}

// nextWall returns the first matching wall time strictly after w.
func (s *Schedule) nextWall(w wallTime) (wallTime, bool) {
	if h, m, sec, ok := s.nextClock(w.hour, w.min, w.sec+1); ok && s.dayMatches(w.date) {
		return wallTime{date: w.date, hour: h, min: m, sec: sec}, true
	}
	limit := w.date.AddDate(searchYears, 0, 0)
	for d := w.date.AddDate(0, 0, 1); d.Before(limit); d = d.AddDate(0, 0, 1) {
		if !s.dayMatches(d) {
			continue
		}
		h, m, sec, _ := s.nextClock(0, 0, 0)
		return wallTime{date: d, hour: h, min: m, sec: sec}, true
	}
	return wallTime{}, false
}

// nextClock returns the first hour:minute:second at or after h:m:sec on one
// day (sec may be 60, meaning the next minute).
func (s *Schedule) nextClock(h, m, sec int) (int, int, int, bool) {
	for ; h < 24; h, m, sec = h+1, 0, 0 {
		if s.hour&(1<<uint(h)) == 0 {
			continue
		}
		for ; m < 60; m, sec = m+1, 0 {
			if s.minute&(1<<uint(m)) == 0 {
				continue
			}
			for ; sec < 60; sec++ {
				if s.second&(1<<uint(sec)) != 0 {
					return h, m, sec, true
				}
			}
		}
	}
	return 0, 0, 0, false
}

// dayMatches applies cronie's day rule: if either day field starts with '*'
// both must match, otherwise either may.
func (s *Schedule) dayMatches(d time.Time) bool {
	if s.month&(1<<uint(d.Month())) == 0 {
		return false
	}
	domOK := s.dom&(1<<uint(d.Day())) != 0
	dowOK := s.dow&(1<<uint(d.Weekday())) != 0
	if s.domStar || s.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// Matches reports whether the wall-clock second of t (in the schedule's zone)
// is a cron time. It is the plain definition, used to check Next.
func (s *Schedule) Matches(t time.Time) bool {
	w := civil(t.In(s.loc))
	return s.dayMatches(w.date) && s.hour&(1<<uint(w.hour)) != 0 && s.minute&(1<<uint(w.min)) != 0 &&
		s.second&(1<<uint(w.sec)) != 0
}

// resolve maps a wall time to the earliest instant after base that shows
// that wall time in loc; ok is false when there is none (a DST gap, or all
// its instants are not after base).
func resolve(w wallTime, loc *time.Location, base time.Time) (time.Time, bool) {
	naive := w.date.Add(time.Duration(w.hour)*time.Hour + time.Duration(w.min)*time.Minute + time.Duration(w.sec)*time.Second)
	var found []time.Time
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := naive.Add(probe).In(loc).Zone()
		at := naive.Add(-time.Duration(off) * time.Second)
		if _, got := at.In(loc).Zone(); got == off && at.After(base) {
			found = append(found, at)
		}
	}
	if len(found) == 0 {
		return time.Time{}, false
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Before(found[j]) })
	return found[0].In(loc), true
}

// MinInterval is a lower bound of the time between two fire times: the
// smallest gap within the finest restricted field. A timer's random delay
// must stay below it, or a run could not tell which slot it fired for.
func (s *Schedule) MinInterval() time.Duration {
	if gap := minGap(s.second, 60); gap > 0 {
		return time.Duration(gap) * time.Second
	}
	if gap := minGap(s.minute, 60); gap > 0 {
		return time.Duration(gap) * time.Minute
	}
	return time.Hour
}

// minGap is the smallest cyclic distance between set bits in [0,n), or 0
// when fewer than two bits are set.
func minGap(set uint64, n int) int {
	first, prev, best := -1, -1, 0
	for v := 0; v < n; v++ {
		if set&(1<<uint(v)) == 0 {
			continue
		}
		if prev >= 0 && (best == 0 || v-prev < best) {
			best = v - prev
		}
		if first < 0 {
			first = v
		}
		prev = v
	}
	if first >= 0 && prev != first && (n-prev+first) < best {
		best = n - prev + first
	}
	return best
}

// FirstInstant maps t to the first instant that shows t's wall time in the
// schedule's zone. In the repeated hour of a fall-back, a second-pass wall
// time is never a fire time (see Next), but a timer re-armed inside that
// hour fires for it; mapping it to the first pass lets the runner's slot
// stamp see that the wall time already ran, so a job never runs twice.
func (s *Schedule) FirstInstant(t time.Time) time.Time {
	if first, ok := resolve(civil(t.In(s.loc)), s.loc, t.Add(-26*time.Hour)); ok && first.Before(t) {
		return first
	}
	return t
}
