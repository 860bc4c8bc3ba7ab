package main

import (
	"bytes"
	"strings"
	"testing"
)

func runCalendar(args ...string) (string, error) {
	cmd := calendarCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestCalendarCLI(t *testing.T) {
	out, err := runCalendar("30 4 1,15 * 5", "--tz", "Europe/Berlin", "--next", "2")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || lines[0] != "Fri *-*-* 04:30:00 Europe/Berlin" || lines[1] != "*-*-01,15 04:30:00 Europe/Berlin" {
		t.Fatalf("output:\n%s", out)
	}
	for _, l := range lines[2:] {
		if !strings.HasPrefix(l, "next: ") || !strings.Contains(l, "T04:30:00+0") {
			t.Errorf("next line %q", l)
		}
	}
	if _, err := runCalendar("0 0 31 2 *"); err == nil || !strings.Contains(err.Error(), "day-of-month") {
		t.Errorf("impossible expression: err = %v", err)
	}
	if _, err := runCalendar("* * * * *", "--tz", "EST"); err == nil || !strings.Contains(err.Error(), "timezone") {
		t.Errorf("bad zone: err = %v", err)
	}
}
