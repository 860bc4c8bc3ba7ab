package desired

import (
	"slices"
	"sync"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
)

// calendar is what a job's units take from its schedule.
type calendar struct {
	onCalendar  []string
	minInterval time.Duration
}

type calendarKey struct{ expr, tz string }

// maxCalendars bounds the memo; past it the memo starts over. Distinct
// schedules on one node are few (tenants mostly run Laravel's every-minute
// schedule:run and a handful of hourly and daily jobs), far fewer than
// jobs.
const maxCalendars = 4096

// calendars memoizes converting a schedule to OnCalendar= values: a
// converge translates every job of the set (10,000 on a node), and
// parsing and converting the schedule was most of it (issue 16, the
// no-op converge), while the result depends on the expression and the
// zone alone. Errors are not kept: a schedule that does not parse is
// rare and fails its job anyway.
var calendars = struct {
	sync.Mutex
	m map[calendarKey]calendar
}{m: map[calendarKey]calendar{}}

// calendarFor is the schedule's OnCalendar= values and shortest interval
// (schedule.ParseWithSeconds), memoized. The values are the caller's
// own copy.
func calendarFor(expr, tz string) (calendar, error) {
	k := calendarKey{expr, tz}
	calendars.Lock()
	c, ok := calendars.m[k]
	calendars.Unlock()
	if !ok {
		s, err := schedule.ParseWithSeconds(expr, tz)
		if err != nil {
			return calendar{}, err
		}
		c = calendar{onCalendar: s.OnCalendar(), minInterval: s.MinInterval()}
		calendars.Lock()
		if len(calendars.m) >= maxCalendars {
			clear(calendars.m)
		}
		calendars.m[k] = c
		calendars.Unlock()
	}
	c.onCalendar = slices.Clone(c.onCalendar)
	return c, nil
}
