package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestExplain(t *testing.T) {
	for _, c := range []struct{ expr, want string }{
		{"15 3 1 * 1", "At 03:15, on day 1 of the month and on Monday " + orRuleNote},
		{"*/5 * * * *", "Every 5 minutes"},
		{"* * * * *", "Every minute"},
		{"0 * * * *", "At minute 0 of every hour"},
		{"30 2 * * 0", "At 02:30 on Sunday"},
		{"30 2 * * 7", "At 02:30 on Sunday"},
		{"30 2 * * *", "At 02:30 every day"},
		{"0 9,17 * * 1-5", "At 09:00 and 17:00 on Monday through Friday"},
		{"0,30 9-17 * * mon-fri", "Every 30 minutes during hours 09 through 17 on Monday through Friday"},
		{"0,20 9-17 * * *", "At minutes 0 and 20 past hours 09 through 17"},
		{"*/15 9-17 * * *", "Every 15 minutes during hours 09 through 17"},
		{"0 */2 * * *", "At minute 0 past hours 00, 02, 04, ..., 22"},
		{"*/7 * * * *", "At minutes 0, 7, 14, ..., 56 of every hour"},
		{"5 4 1,15 * *", "At 04:05 on days 1 and 15 of the month"},
		{"0 0 1 1,7 *", "At 00:00 on day 1 of the month in January and July"},
		{"0 12 * jun-aug sat,sun", "At 12:00 on Sunday and Saturday in June through August"},
		// Macros are their expansion.
		{"@daily", "At 00:00 every day"},
		{"@midnight", "At 00:00 every day"},
		{"@hourly", "At minute 0 of every hour"},
		{"@weekly", "At 00:00 on Sunday"},
		{"@monthly", "At 00:00 on day 1 of the month"},
		{"@yearly", "At 00:00 on day 1 of the month in January"},
		{"@annually", "At 00:00 on day 1 of the month in January"},
		// Either day field starting with '*' makes cronie AND them.
		{"0 0 */2 * 1", "At 00:00 on days 1, 3, 5, ..., 31 of the month, only when that day is also Monday " + andRuleNote},
		{"0 0 1 * */2", "At 00:00 on day 1 of the month, only when that day is also Sunday, Tuesday, Thursday and Saturday " + andRuleNote},
		// OR with a field that covers every day is every day.
		{"0 0 1-31 * 1", "At 00:00 every day"},
		{"0 0 1 * 0-6", "At 00:00 every day"},
	} {
		got, err := Explain(c.expr)
		if err != nil || got != c.want {
			t.Errorf("Explain(%q) = %q, %v\n want %q", c.expr, got, err, c.want)
		}
	}
	if _, err := Explain("@reboot"); err == nil {
		t.Error("Explain(@reboot) succeeded")
	}
}

func TestExplainSeconds(t *testing.T) {
	for expr, want := range map[string]string{
		"*/10 * * * * *": "Every 10 seconds",
		"30 15 3 * * *":  "At second 30, at 03:15 every day",
		"0 15 3 * * *":   "At 03:15 every day",
	} {
		s, err := ParseWithSeconds(expr, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Explain(); got != want {
			t.Errorf("Explain(%q) = %q, want %q", expr, got, want)
		}
	}
}

// TestExplainAgreesWithNext checks the day rule the explanation states
// against the fire times Next computes: an OR explanation must be
// witnessed by fires on a day matching only the day of month and on one
// matching only the weekday; otherwise every fire matches both.
func TestExplainAgreesWithNext(t *testing.T) {
	from := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		expr         string
		day          int
		weekday      time.Weekday
		wantEitherOr bool
	}{
		{"15 3 1 * 1", 1, time.Monday, true},
		{"0 0 13 * 5", 13, time.Friday, true},
		{"0 0 */2 * 1", -1, time.Monday, false},
		{"0 0 1 * */2", 1, -1, false},
		{"0 0 1 * *", 1, -1, false},
	} {
		s, err := Parse(c.expr, "UTC")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(s.Explain(), orRuleNote); got != c.wantEitherOr {
			t.Errorf("%q: explanation %q states the OR rule: %v, want %v", c.expr, s.Explain(), got, c.wantEitherOr)
		}
		domOnly, dowOnly := false, false
		for _, at := range s.NextN(from, 200) {
			domOK := s.dom&(1<<uint(at.Day())) != 0
			dowOK := s.dow&(1<<uint(at.Weekday())) != 0
			domOnly = domOnly || domOK && !dowOK
			dowOnly = dowOnly || dowOK && !domOK
			if !c.wantEitherOr && !(domOK && dowOK) {
				t.Errorf("%q fires %v, which does not match both day fields", c.expr, at)
			}
		}
		if c.wantEitherOr && !(domOnly && dowOnly) {
			t.Errorf("%q: no fire on a day matching one field only (dom-only %v, dow-only %v)", c.expr, domOnly, dowOnly)
		}
	}
}
