package desired

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/hostcron/hostcron/internal/schedule"
)

// The memo answers what parsing answers, the first time and from the
// memo, and a caller changing its values changes no other caller's.
func TestCalendarForIsTheSchedulesConversion(t *testing.T) {
	cases := []struct{ expr, tz string }{
		{"* * * * *", ""}, {"*/5 * * * *", "Europe/Berlin"}, {"30 4 1,15 * 5", "America/New_York"},
		{"*/5 * * * *", "UTC"}, {"0 9 * * mon-fri", "Asia/Kolkata"}, {"*/10 * * * * *", ""},
	}
	for round := 0; round < 2; round++ {
		for _, tc := range cases {
			s, err := schedule.ParseWithSeconds(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			c, err := calendarFor(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.onCalendar, s.OnCalendar()) || c.minInterval != s.MinInterval() {
				t.Errorf("round %d, %q in %q: %q %s, want %q %s", round, tc.expr, tc.tz, c.onCalendar, c.minInterval, s.OnCalendar(), s.MinInterval())
			}
			c.onCalendar[0] = "changed by a caller"
		}
	}
	if _, err := calendarFor("61 * * * *", ""); err == nil {
		t.Error("an invalid schedule converted")
	}
	if _, err := calendarFor("* * * * *", "Not/A_Zone"); err == nil {
		t.Error("an unknown zone converted")
	}
}

// Past maxCalendars schedules the memo starts over rather than grow.
func TestCalendarMemoIsBounded(t *testing.T) {
	for m := 0; m < 60; m++ {
		for h := 0; h < 24*3; h++ {
			if _, err := calendarFor(schedExpr(m, h%24, h/24), ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	calendars.Lock()
	n := len(calendars.m)
	calendars.Unlock()
	if n > maxCalendars {
		t.Errorf("memo holds %d schedules, bound %d", n, maxCalendars)
	}
}

func schedExpr(minute, hour, dom int) string { return fmt.Sprintf("%d %d %d * *", minute, hour, dom+1) }
