package schedule

import (
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary text to the parser. Whatever it accepts must
// render OnCalendar values that carry no control characters and that fire:
// Next after a fixed base is a real occurrence that Matches.
func FuzzParse(f *testing.F) {
	for _, e := range curated {
		f.Add(e)
	}
	for _, e := range []string{"", "@reboot", "* * L * *", "1-2/0 * * * *", "*/5\n* * * *", "0 0 31 2 *"} {
		f.Add(e)
	}
	base := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		s, err := Parse(expr, "Europe/Berlin")
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse(%q) returned %T, want *Error", expr, err)
			}
			return
		}
		for _, v := range s.OnCalendar() {
			if strings.ContainsAny(v, "\n\r\x00%$\\\"'") {
				t.Fatalf("OnCalendar value %q for %q carries unsafe characters", v, expr)
			}
		}
		next := s.Next(base)
		if next.IsZero() || !next.After(base) || !s.Matches(next) {
			t.Fatalf("Next(%q) = %v: not a matching time after base", expr, next)
		}
	})
}
