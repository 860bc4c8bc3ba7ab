package schedule

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOnCalendar(t *testing.T) {
	tests := []struct {
		expr, tz string
		want     []string
	}{
		{"* * * * *", "", []string{"*-*-* *:*:00 UTC"}},
		{"*/5 * * * *", "", []string{"*-*-* *:00,05,10,15,20,25,30,35,40,45,50,55:00 UTC"}},
		{"0 * * * *", "", []string{"*-*-* *:00:00 UTC"}},
		{"0 2 * * *", "Europe/Berlin", []string{"*-*-* 02:00:00 Europe/Berlin"}},
		{"0 0 * * 0", "", []string{"Sun *-*-* 00:00:00 UTC"}},
		{"0 0 * * 7", "", []string{"Sun *-*-* 00:00:00 UTC"}},
		{"0 0 1 * *", "", []string{"*-*-01 00:00:00 UTC"}},
		{"@yearly", "", []string{"*-01-01 00:00:00 UTC"}},
		{"@weekly", "", []string{"Sun *-*-* 00:00:00 UTC"}},
		{"@hourly", "", []string{"*-*-* *:00:00 UTC"}},
		{"30 4 1,15 * 5", "", []string{"Fri *-*-* 04:30:00 UTC", "*-*-01,15 04:30:00 UTC"}},
		{"0 9 * * mon-fri", "", []string{"Mon..Fri *-*-* 09:00:00 UTC"}},
		{"0 9 * * 5-7", "", []string{"Fri..Sun *-*-* 09:00:00 UTC"}},
		{"0 9 * * 0,1", "", []string{"Mon,Sun *-*-* 09:00:00 UTC"}},
		{"0 9 * * 1-7", "", []string{"*-*-* 09:00:00 UTC"}},
		{"0 22 * * 1-5/2", "", []string{"Mon,Wed,Fri *-*-* 22:00:00 UTC"}},
		{"5/15 * * * *", "", []string{"*-*-* *:05,20,35,50:00 UTC"}},
		{"0-30/10 8-18 * * *", "", []string{"*-*-* 08..18:00,10,20,30:00 UTC"}},
		{"0 0 */2 * *", "", []string{"*-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00 UTC"}},
		{"0 0 * JAN,jul *", "", []string{"*-01,07-* 00:00:00 UTC"}},
		{"0 0 * */3 *", "", []string{"*-01,04,07,10-* 00:00:00 UTC"}},
		// day-of-month starts with '*': AND, even though it is restricted
		{"0 0 */2 * 1", "", []string{"Mon *-*-01,03,05,07,09,11,13,15,17,19,21,23,25,27,29,31 00:00:00 UTC"}},
		// both restricted and one side complete: every day
		{"0 0 1-31 * 1", "", []string{"*-*-* 00:00:00 UTC"}},
		{"0 0 29 2 *", "", []string{"*-02-29 00:00:00 UTC"}},
		{"  1   2   3   4   5 ", "", []string{"Fri *-04-* 02:01:00 UTC", "*-04-03 02:01:00 UTC"}},
	}
	for _, tt := range tests {
		s, err := Parse(tt.expr, tt.tz)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.expr, err)
			continue
		}
		if got := s.OnCalendar(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("OnCalendar(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		expr, tz, field, reason string
	}{
		{"", "", "expression", "empty"},
		{"   ", "", "expression", "empty"},
		{"* * * *", "", "expression", "has 4 fields"},
		{"* * * * * *", "", "expression", "has 6 fields"},
		{"60 * * * *", "", "minute", "out of range 0-59"},
		{"* 24 * * *", "", "hour", "out of range 0-23"},
		{"* * 0 * *", "", "day-of-month", "out of range 1-31"},
		{"* * 32 * *", "", "day-of-month", "out of range 1-31"},
		{"* * * 13 *", "", "month", "out of range 1-12"},
		{"* * * * 8", "", "day-of-week", "out of range 0-7"},
		{"*/0 * * * *", "", "minute", "step must not be 0"},
		{"*/60 * * * *", "", "minute", "larger than the field's maximum"},
		{"*/x * * * *", "", "minute", "step must be a positive number"},
		{"5-1 * * * *", "", "minute", "reversed"},
		{"* * * * fri-mon", "", "day-of-week", "reversed"},
		{"* * * * fri-sun", "", "day-of-week", "reversed"}, // sun is 0, as in cronie
		{"* * * foo *", "", "month", "unknown name"},
		{"* * * * monday", "", "day-of-week", "unknown name"},
		{"* * * jan *", "", "", ""}, // valid, checked below as no error
		{"* * L * *", "", "day-of-month", "Quartz"},
		{"* * 15W * *", "", "day-of-month", "Quartz"},
		{"* * * * 5#3", "", "day-of-week", "Quartz"},
		{"* * ? * *", "", "day-of-month", "Quartz"},
		{"* * * * 5L", "", "day-of-week", "Quartz"},
		{"@reboot", "", "expression", "@reboot is not supported"},
		{"@every 5m", "", "expression", "@every"},
		{"@fortnightly", "", "expression", "unknown macro"},
		{"@daily 5", "", "expression", "takes no further fields"},
		{"0 0 31 2 *", "", "day-of-month", "never"},
		{"0 0 30,31 2 *", "", "day-of-month", "never"},
		{"0 0 31 4,6,9,11 *", "", "day-of-month", "never"},
		{"1,,2 * * * *", "", "minute", "empty list item"},
		{"-5 * * * *", "", "minute", "missing value"},
		{"1- * * * *", "", "minute", "missing value"},
		{"+5 * * * *", "", "minute", "not a number"},
		{"* * * * *\n", "", "", ""}, // trailing newline is whitespace
		{"* * *\n* *", "", "expression", "control character"},
		{"* * * * *\x00", "", "expression", "control character"},
		{"* * * * *", "Mars/Olympus", "timezone", "unknown time zone"},
		{"* * * * *", "+02:00", "timezone", "IANA"},
		{"* * * * *", "CET", "timezone", "IANA"},
		{"* * * * *", "EST5EDT", "timezone", "IANA"},
		{"* * * * *", "Etc/GMT+5", "timezone", "fixed-offset"},
		{"* * * * *", "../../etc/passwd", "timezone", "IANA"},
		{"* * * * *", "Europe/Berlin\nFoo=bar", "timezone", "IANA"},
		{"* * * * *", "Europe/Berlin Foo", "timezone", "IANA"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.expr, tt.tz)
		if tt.field == "" {
			if err != nil {
				t.Errorf("Parse(%q): unexpected error %v", tt.expr, err)
			}
			continue
		}
		var perr *Error
		if !errors.As(err, &perr) {
			t.Errorf("Parse(%q, %q) = %v, want *Error on %s", tt.expr, tt.tz, err, tt.field)
			continue
		}
		if perr.Field != tt.field || !strings.Contains(perr.Error(), tt.reason) {
			t.Errorf("Parse(%q, %q) = %q (field %s), want field %s and %q", tt.expr, tt.tz, perr.Error(), perr.Field, tt.field, tt.reason)
		}
	}
}

func TestZonesAccepted(t *testing.T) {
	for _, tz := range []string{"", "UTC", "Etc/UTC", "Europe/Berlin", "America/New_York", "America/Argentina/Buenos_Aires", "America/Port-au-Prince", "Asia/Kolkata"} {
		s, err := Parse("0 0 * * *", tz)
		if err != nil {
			t.Errorf("zone %q: %v", tz, err)
			continue
		}
		want := tz
		if tz == "" || tz == "Etc/UTC" {
			want = "UTC"
		}
		if got := s.OnCalendar()[0]; !strings.HasSuffix(got, " "+want) {
			t.Errorf("zone %q: OnCalendar %q lacks suffix %q", tz, got, want)
		}
	}
}

func mustParse(t *testing.T, expr, tz string) *Schedule {
	t.Helper()
	s, err := Parse(expr, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, tz, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNextDST(t *testing.T) {
	tests := []struct {
		name, expr, tz, base string
		want                 []string // UTC
	}{
		// Spring forward in Berlin: 2026-03-29 02:00 CET -> 03:00 CEST. 02:30 does not exist.
		{"spring gap skipped", "30 2 * * *", "Europe/Berlin", "2026-03-28 00:00",
			[]string{"2026-03-28 01:30", "2026-03-30 00:30", "2026-03-31 00:30"}},
		{"spring quarter hours", "*/15 * * * *", "Europe/Berlin", "2026-03-29 00:30",
			[]string{"2026-03-29 00:45", "2026-03-29 01:00", "2026-03-29 01:15"}},
		// Fall back: 2026-10-25 03:00 CEST -> 02:00 CET. 02:30 exists twice; fire once.
		{"fall back once", "30 2 * * *", "Europe/Berlin", "2026-10-24 00:00",
			[]string{"2026-10-24 00:30", "2026-10-25 00:30", "2026-10-26 01:30"}},
		{"fall back repeated hour skipped", "*/15 * * * *", "Europe/Berlin", "2026-10-25 00:40",
			[]string{"2026-10-25 00:45", "2026-10-25 02:00", "2026-10-25 02:15"}},
		// A base inside the second pass (a timer armed then) fires in it.
		{"armed in second pass", "30 2 * * *", "Europe/Berlin", "2026-10-25 01:05",
			[]string{"2026-10-25 01:30", "2026-10-26 01:30"}},
		{"leap day", "0 0 29 2 *", "", "2026-01-01 00:00",
			[]string{"2028-02-29 00:00", "2032-02-29 00:00"}},
		// AND of a '*'-field with a weekday can be a decade away (found by
		// the fuzzer; checked against systemd-analyze).
		{"rare weekday and date", "0 0 */7 9 2", "", "2026-11-22 00:00",
			[]string{"2037-09-01 00:00", "2037-09-08 00:00"}},
		{"sunday leap day", "0 0 29 2 */7", "", "2032-03-01 00:00",
			[]string{"2060-02-29 00:00"}},
		{"dom or dow", "0 12 13 * 5", "", "2026-11-01 00:00",
			[]string{"2026-11-06 12:00", "2026-11-13 12:00", "2026-11-20 12:00", "2026-11-27 12:00", "2026-12-04 12:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.expr, tt.tz)
			got := s.NextN(utc(tt.base), len(tt.want))
			var gotS []string
			for _, g := range got {
				gotS = append(gotS, g.UTC().Format("2006-01-02 15:04"))
			}
			if !reflect.DeepEqual(gotS, tt.want) {
				t.Errorf("NextN = %v, want %v", gotS, tt.want)
			}
		})
	}
}

func TestPrev(t *testing.T) {
	s := mustParse(t, "*/5 * * * *", "")
	if got := s.Prev(utc("2026-11-21 10:07").Add(13 * time.Second)); !got.Equal(utc("2026-11-21 10:05")) {
		t.Errorf("Prev = %v", got)
	}
	if got := s.Prev(utc("2026-11-21 10:05")); !got.Equal(utc("2026-11-21 10:05")) {
		t.Errorf("Prev at an occurrence = %v, want that occurrence", got)
	}
	y := mustParse(t, "@yearly", "Europe/Berlin")
	if got := y.Prev(utc("2026-06-01 00:00")); !got.Equal(utc("2025-12-31 23:00")) {
		t.Errorf("Prev yearly = %v", got)
	}
}

func TestSecondsField(t *testing.T) {
	if _, err := Parse("*/10 * * * * *", ""); err == nil {
		t.Error("Parse accepted 6 fields; only ParseWithSeconds may")
	}
	s, err := ParseWithSeconds("*/10 * * * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.OnCalendar(); !reflect.DeepEqual(got, []string{"*-*-* *:*:00,10,20,30,40,50 Europe/Berlin"}) {
		t.Errorf("OnCalendar = %q", got)
	}
	base := utc("2026-11-21 10:00").Add(25 * time.Second)
	if got := s.NextN(base, 2); !got[0].Equal(base.Add(5*time.Second)) || !got[1].Equal(base.Add(15*time.Second)) {
		t.Errorf("NextN = %v", got)
	}
	if got := s.Prev(base); !got.Equal(base.Add(-5 * time.Second)) {
		t.Errorf("Prev = %v", got)
	}
	if s.MinInterval() != 10*time.Second {
		t.Errorf("MinInterval = %v", s.MinInterval())
	}
	// Five fields still parse the same way.
	if f, _ := ParseWithSeconds("*/5 * * * *", ""); f.MinInterval() != 5*time.Minute || f.OnCalendar()[0] != "*-*-* *:00,05,10,15,20,25,30,35,40,45,50,55:00 UTC" {
		t.Errorf("5-field through ParseWithSeconds: %v %v", f.MinInterval(), f.OnCalendar())
	}
	for expr, want := range map[string]time.Duration{"0 3 * * *": time.Hour, "0,50 * * * *": 10 * time.Minute, "5,55 * * * * *": 10 * time.Second} {
		if got := mustParseSec(t, expr).MinInterval(); got != want {
			t.Errorf("MinInterval(%q) = %v, want %v", expr, got, want)
		}
	}
	if _, err := ParseWithSeconds("60 * * * * *", ""); err == nil || !strings.Contains(err.Error(), "second") {
		t.Errorf("second 60: %v", err)
	}
}

func mustParseSec(t *testing.T, expr string) *Schedule {
	t.Helper()
	s, err := ParseWithSeconds(expr, "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
