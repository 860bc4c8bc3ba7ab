package schedule

import "time"

// NoGap is what ShortestGap returns for a schedule that fires at most once
// in the search horizon: no two fire times, so no gap.
const NoGap = time.Duration(1<<63 - 1)

// cycleDays is the Gregorian cycle: day-of-month, month and weekday
// patterns repeat every 146,097 days, so one cycle holds every distance
// between firing days a schedule can have (Sunday 29 February included).
const cycleDays = 146097

// dstWalkFires bounds the walk around one DST change.
const dstWalkFires = 20000

// ShortestGap returns the shortest real time between two consecutive fire
// times from `from` on. Every firing day shares the same times of day, so
// the gap is the smaller of the shortest gap within a day and the shortest
// distance between two firing days (over a whole Gregorian cycle) less the
// day's span from first to last fire; then, because a clock change makes
// real gaps differ from wall-clock ones, the fire times around each of the
// zone's changes in the next two years are walked and their real gaps
// taken too. It costs a few milliseconds.
func (s *Schedule) ShortestGap(from time.Time) time.Duration {
	tod := s.timesOfDay()
	if len(tod) == 0 {
		return NoGap
	}
	best := NoGap
	for i := 1; i < len(tod); i++ {
		best = min(best, time.Duration(tod[i]-tod[i-1])*time.Second)
	}
	if days := s.closestFiringDays(from.In(s.loc)); days > 0 {
		span := tod[len(tod)-1] - tod[0]
		best = min(best, time.Duration(days*86400-span)*time.Second)
	}
	for _, change := range zoneChanges(s.loc, from, from.AddDate(2, 0, 0)) {
		best = min(best, s.walkGap(change.Add(-48*time.Hour), change.Add(48*time.Hour)))
	}
	return best
}

// timesOfDay lists the seconds of the day the schedule fires at, ascending.
func (s *Schedule) timesOfDay() []int {
	var out []int
	for h := 0; h < 24; h++ {
		if s.hour&(1<<uint(h)) == 0 {
			continue
		}
		for m := 0; m < 60; m++ {
			if s.minute&(1<<uint(m)) == 0 {
				continue
			}
			for sec := 0; sec < 60; sec++ {
				if s.second&(1<<uint(sec)) != 0 {
					out = append(out, h*3600+m*60+sec)
				}
			}
		}
	}
	return out
}

// closestFiringDays returns the fewest days between two firing days over
// one Gregorian cycle from the day of t, or 0 if at most one day fires.
func (s *Schedule) closestFiringDays(t time.Time) int {
	d := time.Date(t.Year(), t.Month(), t.Day(), 12, 0, 0, 0, time.UTC)
	prev, best := -1, 0
	for i := 0; i <= cycleDays; i++ {
		if s.dayMatches(d) {
			if prev >= 0 && (best == 0 || i-prev < best) {
				best = i - prev
				if best == 1 {
					return 1
				}
			}
			prev = i
		}
		d = d.AddDate(0, 0, 1)
	}
	return best
}

// walkGap is the shortest real gap between consecutive fire times in
// [from, to], by walking them.
func (s *Schedule) walkGap(from, to time.Time) time.Duration {
	best := NoGap
	prev := s.Next(from)
	for i := 0; i < dstWalkFires && !prev.IsZero() && prev.Before(to); i++ {
		next := s.Next(prev)
		if next.IsZero() {
			break
		}
		best = min(best, next.Sub(prev))
		prev = next
	}
	return best
}

// zoneChanges returns the instants in [from, to) at which loc's UTC offset
// changes, to the minute.
func zoneChanges(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	_, off := from.In(loc).Zone()
	for t := from; t.Before(to); t = t.Add(24 * time.Hour) {
		next := t.Add(24 * time.Hour)
		if _, o := next.In(loc).Zone(); o != off {
			lo, hi := t, next // the change lies in (lo, hi]
			for hi.Sub(lo) > time.Minute {
				mid := lo.Add(hi.Sub(lo) / 2)
				if _, o := mid.In(loc).Zone(); o == off {
					lo = mid
				} else {
					hi = mid
				}
			}
			out = append(out, hi)
			off = o
		}
	}
	return out
}
