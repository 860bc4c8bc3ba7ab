package schedule

import (
	"fmt"
	"strings"
)

var weekdayNames = [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}

// OnCalendar returns the systemd OnCalendar= values whose union fires at
// exactly the cron times. systemd ANDs a weekday with a date inside one
// value, so cron's "day-of-month OR day-of-week" needs two values.
func (s *Schedule) OnCalendar() []string {
	zone := ZoneName(s.loc)
	clock := fmt.Sprintf("%s:%s:%s", component(s.hour, hourField, 2), component(s.minute, minuteField, 2),
		component(s.second, secondField, 2))
	month := component(s.month, monthField, 2)
	value := func(weekdays, dom string) string {
		v := fmt.Sprintf("*-%s-%s %s %s", month, dom, clock, zone)
		if weekdays != "" {
			v = weekdays + " " + v
		}
		return v
	}
	if s.domStar || s.dowStar {
		// cronie: if either day field starts with '*', both must match.
		return []string{value(weekdays(s.dow), component(s.dom, domField, 2))}
	}
	if s.dow == allWeek || s.dom == allDays {
		// Either side matches every day, so their OR does too.
		return []string{value("", "*")}
	}
	return []string{value(weekdays(s.dow), "*"), value("", component(s.dom, domField, 2))}
}

const (
	allDays = uint64(1<<32 - 2) // bits 1..31
	allWeek = uint64(1<<7 - 1)  // bits 0..6
)

// component renders a bit set of a numeric field in systemd syntax: "*" or
// a list of values and "a..b" ranges. It never emits systemd's "start/step"
// repetition: systemd 252 computes it wrongly across a month or year
// rollover ("*-*-* 00/7:00" from 23:59 on 31 December skips midnight), as
// the differential test against systemd-analyze showed.
func component(set uint64, f field, width int) string {
	values := members(set, f)
	if len(values) == f.max-f.min+1 {
		return "*"
	}
	num := func(v int) string { return fmt.Sprintf("%0*d", width, v) }
	var parts []string
	for _, r := range consecutiveRuns(values) {
		switch {
		case r[1]-r[0] >= 2:
			parts = append(parts, num(r[0])+".."+num(r[1]))
		case r[1] == r[0]+1:
			parts = append(parts, num(r[0]), num(r[1]))
		default:
			parts = append(parts, num(r[0]))
		}
	}
	return strings.Join(parts, ",")
}

// members lists the values in set within the field's range.
func members(set uint64, f field) []int {
	var out []int
	for v := f.min; v <= f.max; v++ {
		if set&(1<<uint(v)) != 0 {
			out = append(out, v)
		}
	}
	return out
}

// weekdays renders a weekday set in Monday-first order, the only order in
// which systemd accepts ranges (it rejects ranges that wrap past Sunday).
// An unrestricted set renders as "" (no weekday prefix).
func weekdays(set uint64) string {
	if set == allWeek {
		return ""
	}
	order := [7]int{1, 2, 3, 4, 5, 6, 0}
	var parts []string
	for i := 0; i < 7; {
		if set&(1<<order[i]) == 0 {
			i++
			continue
		}
		j := i
		for j+1 < 7 && set&(1<<order[j+1]) != 0 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, weekdayNames[order[i]]+".."+weekdayNames[order[j]])
		case j == i+1:
			parts = append(parts, weekdayNames[order[i]], weekdayNames[order[j]])
		default:
			parts = append(parts, weekdayNames[order[i]])
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// consecutiveRuns splits ascending values into runs of consecutive
// numbers, each as its first and last value: OnCalendar= writes a run of
// three or more as a range, and so does the explanation.
func consecutiveRuns(values []int) [][2]int {
	var runs [][2]int
	for i := 0; i < len(values); {
		j := i
		for j+1 < len(values) && values[j+1] == values[j]+1 {
			j++
		}
		runs = append(runs, [2]int{values[i], values[j]})
		i = j + 1
	}
	return runs
}
