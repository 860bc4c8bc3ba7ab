package schedule

import (
	"fmt"
	"strconv"
	"strings"
)

// orRuleNote is stated whenever cron ORs the two day fields: tenants
// reading "on day 1 and on Monday" expect both to hold, cron wants either.
const orRuleNote = "(a day matches if EITHER the day of month OR the weekday matches)"

// andRuleNote is stated when both day fields restrict but one starts with
// '*' ("*/2"): cronie then ANDs them, which surprises the other way.
const andRuleNote = "(both must match: cron ORs the two day fields only when neither starts with '*')"

var (
	weekdayLong = [7]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	monthLong   = [13]string{"", "January", "February", "March", "April", "May", "June", "July",
		"August", "September", "October", "November", "December"}
)

// clockListMax is how many fire times of a day are spelled out as clock
// times ("At 09:00 and 17:30") before the minute and hour fields are
// described separately.
const clockListMax = 4

// Explain parses a 5-field expression or macro and describes it in plain
// English.
func Explain(expr string) (string, error) {
	s, err := Parse(expr, "")
	if err != nil {
		return "", fmt.Errorf("explain %q: %w", expr, err)
	}
	return s.Explain(), nil
}

// Explain describes the schedule in plain English. It reads the parsed bit
// sets and the same '*' flags dayMatches uses, never the text, so what it
// says is what Next computes.
func (s *Schedule) Explain() string {
	clock, fixed := s.timePhrase()
	day, or := s.dayPhrase()
	month := s.monthPhrase()
	out := clock
	switch {
	case or:
		out += ", " + day
	case day != "":
		out += " " + day
	case fixed && month == "":
		out += " every day"
	}
	if month != "" {
		out += " " + month
	}
	if or {
		out += " " + orRuleNote
	}
	switch sec := s.secondPhrase(); {
	case sec == "":
	case out == "Every minute":
		out = sec // "every 10 seconds" says it all
	default:
		out = sec + ", " + lowerFirst(out)
	}
	return out
}

// timePhrase describes minute and hour; fixed reports that it is a list of
// clock times (so "every day" reads naturally after it).
func (s *Schedule) timePhrase() (string, bool) {
	mins, hours := members(s.minute, minuteField), members(s.hour, hourField)
	if len(mins)*len(hours) <= clockListMax {
		var times []string
		for _, h := range hours {
			for _, m := range mins {
				times = append(times, fmt.Sprintf("%02d:%02d", h, m))
			}
		}
		return "At " + joinAnd(times), true
	}
	minPart, perMinute := minutesPhrase(mins)
	switch {
	case len(hours) == 24 && perMinute:
		return upperFirst(minPart), false
	case len(hours) == 24:
		return upperFirst(minPart) + " of every hour", false
	case perMinute:
		return upperFirst(minPart) + " during " + hoursPhrase(hours), false
	default:
		return upperFirst(minPart) + " past " + hoursPhrase(hours), false
	}
}

// minutesPhrase describes the minute field; perMinute reports a repetition
// ("every 5 minutes") rather than named minutes.
func minutesPhrase(mins []int) (string, bool) {
	switch n := step(mins, 60); {
	case n == 1:
		return "every minute", true
	case n > 1:
		return fmt.Sprintf("every %d minutes", n), true
	case len(mins) == 1:
		return fmt.Sprintf("at minute %d", mins[0]), false
	default:
		return "at minutes " + listPhrase(mins, strconv.Itoa), false
	}
}

func hoursPhrase(hours []int) string {
	two := func(h int) string { return fmt.Sprintf("%02d", h) }
	if len(hours) == 1 {
		return "hour " + two(hours[0])
	}
	return "hours " + listPhrase(hours, two)
}

// step returns n when values are 0, n, 2n, ... covering a whole cycle of
// size and n divides it (so the repetition is even across the boundary),
// else 0.
func step(values []int, size int) int {
	if len(values) < 2 || values[0] != 0 {
		if len(values) == size {
			return 1
		}
		return 0
	}
	n := values[1] - values[0]
	if size%n != 0 || len(values) != size/n {
		return 0
	}
	for i, v := range values {
		if v != i*n {
			return 0
		}
	}
	return n
}

// dayPhrase describes the day fields; or reports that cron ORs them, which
// the caller must state.
func (s *Schedule) dayPhrase() (string, bool) {
	domAll, dowAll := s.dom&allDays == allDays, s.dow == allWeek
	if !s.domStar && !s.dowStar {
		if domAll || dowAll {
			return "", false // the OR of "every day" with anything is every day
		}
		return "on " + domPhrase(s.dom) + " and on " + dowPhrase(s.dow), true
	}
	switch {
	case domAll && dowAll:
		return "", false
	case dowAll:
		return "on " + domPhrase(s.dom), false
	case domAll:
		return "on " + dowPhrase(s.dow), false
	default:
		return "on " + domPhrase(s.dom) + ", only when that day is also " + dowPhrase(s.dow) + " " + andRuleNote, false
	}
}

func domPhrase(set uint64) string {
	days := members(set, domField)
	if len(days) == 1 {
		return fmt.Sprintf("day %d of the month", days[0])
	}
	return "days " + listPhrase(days, strconv.Itoa) + " of the month"
}

func dowPhrase(set uint64) string {
	return listPhrase(members(set&allWeek, dowField), func(d int) string { return weekdayLong[d] })
}

func (s *Schedule) monthPhrase() string {
	months := members(s.month, monthField)
	if len(months) == 12 {
		return ""
	}
	return "in " + listPhrase(months, func(m int) string { return monthLong[m] })
}

// secondPhrase describes a seconds field other than "0" (only operator-made
// 6-field schedules have one); "" otherwise.
func (s *Schedule) secondPhrase() string {
	secs := members(s.second, secondField)
	switch n := step(secs, 60); {
	case len(secs) == 1 && secs[0] == 0:
		return ""
	case n == 1:
		return "Every second"
	case n > 1:
		return fmt.Sprintf("Every %d seconds", n)
	case len(secs) == 1:
		return fmt.Sprintf("At second %d", secs[0])
	default:
		return "At seconds " + listPhrase(secs, strconv.Itoa)
	}
}

// listPhrase renders ascending values: an even progression of five or more
// as "1, 3, 5, ..., 31", runs of three or more as "a through b", the rest
// listed with a final "and".
func listPhrase(values []int, name func(int) string) string {
	if len(values) >= 5 && evenStep(values) > 1 {
		return fmt.Sprintf("%s, %s, %s, ..., %s", name(values[0]), name(values[1]), name(values[2]), name(values[len(values)-1]))
	}
	var parts []string
	for _, r := range consecutiveRuns(values) {
		switch {
		case r[1]-r[0] >= 2:
			parts = append(parts, name(r[0])+" through "+name(r[1]))
		case r[1] == r[0]+1:
			parts = append(parts, name(r[0]), name(r[1]))
		default:
			parts = append(parts, name(r[0]))
		}
	}
	return joinAnd(parts)
}

// evenStep is the common difference of values, or 0 if there is none.
func evenStep(values []int) int {
	n := values[1] - values[0]
	for i := 2; i < len(values); i++ {
		if values[i]-values[i-1] != n {
			return 0
		}
	}
	return n
}

func joinAnd(parts []string) string {
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
