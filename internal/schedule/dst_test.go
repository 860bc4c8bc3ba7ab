package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestDSTNotes(t *testing.T) {
	from := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	type note struct{ kind, wall, at string } // at: UTC RFC 3339, "" for zero
	for _, c := range []struct {
		expr, tz string
		want     []note
	}{
		{"30 2 * * *", "Europe/Berlin", []note{
			{DSTGap, "2026-03-29T02:30", ""},
			{DSTRepeat, "2026-10-25T02:30", "2026-10-25T00:30:00Z"}, // the first 02:30, at +02:00
		}},
		{"0 4 * * *", "Europe/Berlin", nil},
		{"0 2 * * *", "Europe/Berlin", []note{ // 02:00 is the gap's first minute; 03:00 would not be
			{DSTGap, "2026-03-29T02:00", ""},
			{DSTRepeat, "2026-10-25T02:00", "2026-10-25T00:00:00Z"},
		}},
		{"0 3 * * *", "Europe/Berlin", nil},
		{"30 2 * * *", "UTC", nil},
		{"* * * * *", "UTC", nil},
		// New York changes at 02:00 both ways: the gap is 02:00-02:59, the
		// repeat 01:00-01:59.
		{"30 2 * * *", "America/New_York", []note{{DSTGap, "2026-03-08T02:30", ""}}},
		{"30 1 * * *", "America/New_York", []note{{DSTRepeat, "2026-11-01T01:30", "2026-11-01T05:30:00Z"}}},
		// Lord Howe moves by 30 minutes: back from 02:00 to 01:30 on 5 April,
		// forward from 02:00 to 02:30 on 4 October.
		{"15 2 * * *", "Australia/Lord_Howe", []note{{DSTGap, "2026-10-04T02:15", ""}}},
		{"45 1 * * *", "Australia/Lord_Howe", []note{{DSTRepeat, "2026-04-05T01:45", "2026-04-04T14:45:00Z"}}},
		{"30 2 * * *", "Australia/Lord_Howe", nil},
		{"30 2 * * 0", "Europe/Berlin", []note{ // both changes are on Sundays
			{DSTGap, "2026-03-29T02:30", ""},
			{DSTRepeat, "2026-10-25T02:30", "2026-10-25T00:30:00Z"},
		}},
		{"30 2 * * 1", "Europe/Berlin", nil},
	} {
		got, err := DSTNotes(c.expr, c.tz, from, 12)
		if err != nil {
			t.Fatal(err)
		}
		var gotN []note
		for _, n := range got {
			at := ""
			if !n.At.IsZero() {
				at = n.At.UTC().Format(time.RFC3339)
			}
			gotN = append(gotN, note{n.Kind, n.Wall, at})
			if n.Message == "" || !strings.Contains(n.Message, n.Wall) {
				t.Errorf("%q in %s: message %q does not name %s", c.expr, c.tz, n.Message, n.Wall)
			}
		}
		if len(gotN) != len(c.want) {
			t.Errorf("%q in %s: notes %v, want %v", c.expr, c.tz, gotN, c.want)
			continue
		}
		for i := range gotN {
			if gotN[i] != c.want[i] {
				t.Errorf("%q in %s: note %d = %v, want %v", c.expr, c.tz, i, gotN[i], c.want[i])
			}
		}
		if got == nil {
			t.Errorf("%q in %s: nil, want an empty list", c.expr, c.tz)
		}
	}
}

func TestDSTNotesMessages(t *testing.T) {
	from := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	got, err := DSTNotes("30 2 * * *", "Europe/Berlin", from, 12)
	if err != nil || len(got) != 2 {
		t.Fatalf("notes %v, %v", got, err)
	}
	for i, want := range []string{
		"2026-03-29T02:30 does not exist in Europe/Berlin: clocks go forward from 02:00 to 03:00, so this run is skipped",
		"2026-10-25T02:30 occurs twice in Europe/Berlin: clocks go back from 03:00 to 02:00; the job runs once, at the first 02:30 (+02:00, 00:30 UTC)",
	} {
		if got[i].Message != want {
			t.Errorf("message %d = %q\nwant %q", i, got[i].Message, want)
		}
	}
	// An every-minute job has 60 affected minutes per change: the first
	// few are listed, the last of them counts the rest.
	many, err := DSTNotes("* * * * *", "Europe/Berlin", from, 12)
	if err != nil {
		t.Fatal(err)
	}
	if len(many) != 2*maxNotesPerChange || !strings.HasSuffix(many[maxNotesPerChange-1].Message, "(and 55 more fire times in the same change)") {
		t.Errorf("every minute: %d notes, %q", len(many), many[maxNotesPerChange-1].Message)
	}
	if _, err := DSTNotes("30 2 * * *", "CET", from, 12); err == nil {
		t.Error("DSTNotes with a bad zone succeeded")
	}
}

// TestDSTNotesAgreeWithNext walks every fire time of the year with Next
// and checks the notes against it: a gap note's wall time never fires, a
// repeat note's wall time fires exactly once, at At, and a wall time that
// fires twice or a day missing its daily run is noted.
func TestDSTNotesAgreeWithNext(t *testing.T) {
	from := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 12, 0)
	for _, c := range []struct{ expr, tz string }{
		{"30 2 * * *", "Europe/Berlin"},
		{"*/20 * * * *", "Europe/Berlin"},
		{"30 1,2 * * *", "America/New_York"},
		{"15,45 1,2 * * *", "Australia/Lord_Howe"},
		{"0 0 * * *", "America/Santiago"}, // changes at midnight
	} {
		s, err := Parse(c.expr, c.tz)
		if err != nil {
			t.Fatal(err)
		}
		fired := map[string][]time.Time{}
		for at := s.Next(from); !at.IsZero() && at.Before(to); at = s.Next(at) {
			w := at.In(s.loc).Format("2006-01-02T15:04")
			fired[w] = append(fired[w], at)
		}
		notes := s.DSTNotes(from, 12)
		for _, n := range notes {
			switch n.Kind {
			case DSTGap:
				if len(fired[n.Wall]) != 0 {
					t.Errorf("%q in %s: gap note %s, but it fired %v", c.expr, c.tz, n.Wall, fired[n.Wall])
				}
			case DSTRepeat:
				if f := fired[n.Wall]; len(f) != 1 || !f[0].Equal(n.At) {
					t.Errorf("%q in %s: repeat note %s at %v, but it fired %v", c.expr, c.tz, n.Wall, n.At, f)
				}
			}
		}
		for w, f := range fired {
			if len(f) > 1 {
				t.Errorf("%q in %s: %s fired %d times", c.expr, c.tz, w, len(f))
			}
		}
		// Every matching wall time either fires or has a gap note.
		gaps := 0
		for _, n := range notes {
			if n.Kind == DSTGap {
				gaps++
			}
		}
		wantFires := 0
		for w := civil(from.In(s.loc)); ; {
			var ok bool
			if w, ok = s.nextWall(w); !ok {
				break
			}
			at := time.Date(w.date.Year(), w.date.Month(), w.date.Day(), w.hour, w.min, w.sec, 0, s.loc)
			if !at.Before(to) {
				break
			}
			wantFires++
		}
		if len(fired)+gaps != wantFires {
			t.Errorf("%q in %s: %d fired + %d gap notes, want %d matching wall times", c.expr, c.tz, len(fired), gaps, wantFires)
		}
	}
}
