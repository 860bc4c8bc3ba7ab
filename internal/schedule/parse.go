// Package schedule parses 5-field cron expressions with Vixie/cronie
// semantics, translates them to systemd OnCalendar= values and computes the
// fire times systemd will produce for them.
package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// field describes one of the five cron fields.
type field struct {
	name     string
	min, max int
	names    map[string]int // 3-letter names, lower case; nil if none
}

var (
	secondField = field{name: "second", min: 0, max: 59}
	minuteField = field{name: "minute", min: 0, max: 59}
	hourField   = field{name: "hour", min: 0, max: 23}
	domField    = field{name: "day-of-month", min: 1, max: 31}
	monthField  = field{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
	}}
	// Day of week accepts 0-7 like cronie; 7 is folded onto 0 (Sunday).
	dowField = field{name: "day-of-week", min: 0, max: 7, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6,
	}}
	fields = [5]field{minuteField, hourField, domField, monthField, dowField}
)

// macros are the cronie @-shortcuts that map onto a fixed expression.
// @reboot has no calendar meaning and is rejected.
var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// Error is a validation error; Field names the part of the input at fault
// ("expression", "minute", ..., "timezone") so an API can report it.
type Error struct {
	Field  string
	Value  string
	Reason string
}

func (e *Error) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason)
}

// Schedule is a parsed cron expression bound to a time zone.
type Schedule struct {
	expr   string
	second uint64 // bit i set = value i matches; only bit 0 for 5-field cron
	minute uint64
	hour   uint64
	dom    uint64
	month  uint64
	dow    uint64 // bits 0..6, Sunday = 0
	// domStar/dowStar record whether the field text started with '*';
	// cronie ORs the two day fields only when neither does.
	domStar, dowStar bool
	loc              *time.Location
}

// Expr returns the expression as given (macros not expanded).
func (s *Schedule) Expr() string { return s.expr }

// Parse parses a 5-field cron expression in the named IANA time zone
// ("" = UTC). This is what tenants may write.
func Parse(expr, tz string) (*Schedule, error) {
	return parse(expr, tz, false)
}

// ParseWithSeconds also accepts a leading seconds field (6 fields, as in
// the OJS extended format). The API never accepts it; the node side does,
// so that tests and operators can run sub-minute schedules.
func ParseWithSeconds(expr, tz string) (*Schedule, error) {
	return parse(expr, tz, true)
}

func parse(expr, tz string, seconds bool) (*Schedule, error) {
	loc, err := LoadZone(tz)
	if err != nil {
		return nil, err
	}
	s, err := parseExpr(expr, seconds)
	if err != nil {
		return nil, err
	}
	s.loc = loc
	return s, nil
}

func parseExpr(expr string, seconds bool) (*Schedule, error) {
	// Only space and tab separate fields, as in crontab. Go's TrimSpace and
	// Fields would also split on \v, \f, U+0085, U+00A0, U+2028/2029/3000:
	// text that looks like one field to a reviewer would parse as two.
	// A line end around the expression is trimmed, as before.
	text := strings.Trim(expr, " \t\r\n")
	if r, bad := badSeparator(text); bad {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return nil, &Error{Field: "expression", Reason: fmt.Sprintf("contains a control character (%U)", r)}
		}
		return nil, &Error{Field: "expression", Reason: fmt.Sprintf("contains %U; only space and tab separate fields", r)}
	}
	if text == "" {
		return nil, &Error{Field: "expression", Reason: "is empty"}
	}
	if strings.HasPrefix(text, "@") {
		word := fieldsOf(text)[0]
		m, ok := macros[strings.ToLower(word)]
		switch {
		case ok && len(fieldsOf(text)) == 1:
			text = m
		case ok:
			return nil, &Error{Field: "expression", Value: expr, Reason: "a macro takes no further fields"}
		case strings.EqualFold(word, "@reboot"):
			return nil, &Error{Field: "expression", Value: word, Reason: "@reboot is not supported: it has no calendar time"}
		case strings.EqualFold(word, "@every"):
			return nil, &Error{Field: "expression", Value: word, Reason: "@every intervals are not supported; use a 5-field expression"}
		default:
			return nil, &Error{Field: "expression", Value: word, Reason: "unknown macro (want @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)"}
		}
	}
	parts := fieldsOf(text)
	secondSet := uint64(1)
	if seconds && len(parts) == 6 {
		set, err := parseField(parts[0], secondField)
		if err != nil {
			return nil, err
		}
		secondSet, parts = set, parts[1:]
	}
	if len(parts) != 5 {
		return nil, &Error{Field: "expression", Value: expr,
			Reason: fmt.Sprintf("has %d fields, want 5 (minute hour day-of-month month day-of-week)", len(parts))}
	}
	var sets [5]uint64
	for i, p := range parts {
		set, err := parseField(p, fields[i])
		if err != nil {
			return nil, err
		}
		sets[i] = set
	}
	// Fold day-of-week 7 onto Sunday.
	if sets[4]&(1<<7) != 0 {
		sets[4] = sets[4]&^(1<<7) | 1
	}
	s := &Schedule{
		expr:   strings.Trim(expr, " \t\r\n"),
		second: secondSet,
		minute: sets[0], hour: sets[1], dom: sets[2], month: sets[3], dow: sets[4],
		domStar: strings.HasPrefix(parts[2], "*"),
		dowStar: strings.HasPrefix(parts[4], "*"),
	}
	if !s.canFire() {
		return nil, &Error{Field: "day-of-month", Value: parts[2],
			Reason: fmt.Sprintf("never occurs in month %q, so the job would never run", parts[3])}
	}
	return s, nil
}

// badSeparator finds the first control character or whitespace other than
// space and tab (invalid UTF-8 counts as a control character).
func badSeparator(expr string) (rune, bool) {
	for _, r := range expr {
		if r == ' ' || r == '\t' {
			continue
		}
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.IsSpace(r) || unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp) {
			return r, true
		}
	}
	return 0, false
}

// fieldsOf splits on runs of spaces and tabs only.
func fieldsOf(text string) []string {
	return strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == '\t' })
}

// parseField parses a comma-separated list of items into a bit set.
func parseField(text string, f field) (uint64, error) {
	var set uint64
	for _, item := range strings.Split(text, ",") {
		bits, err := parseItem(item, f)
		if err != nil {
			return 0, err
		}
		set |= bits
	}
	return set, nil
}

// parseItem parses one list item: *, N, A-B, each optionally followed by /STEP.
// "N/STEP" means N-max/STEP, as in cronie.
func parseItem(item string, f field) (uint64, error) {
	if item == "" {
		return 0, &Error{Field: f.name, Value: item, Reason: "empty list item"}
	}
	if tok := strings.IndexAny(item, "LW#?"); tok >= 0 && !isName(item, f) {
		return 0, &Error{Field: f.name, Value: item,
			Reason: fmt.Sprintf("Quartz syntax %q is not supported by cron", string(item[tok]))}
	}
	rangePart, stepPart, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, err := strconv.Atoi(stepPart)
		switch {
		case err != nil || !isDigits(stepPart):
			return 0, &Error{Field: f.name, Value: item, Reason: "step must be a positive number"}
		case n == 0:
			return 0, &Error{Field: f.name, Value: item, Reason: "step must not be 0"}
		case n > f.max:
			return 0, &Error{Field: f.name, Value: item, Reason: fmt.Sprintf("step %d is larger than the field's maximum %d", n, f.max)}
		}
		step = n
	}
	lo, hi := f.min, f.max
	switch a, b, isRange := strings.Cut(rangePart, "-"); {
	case rangePart == "*":
	case isRange:
		var err error
		if lo, err = parseValue(a, f, item); err != nil {
			return 0, err
		}
		if hi, err = parseValue(b, f, item); err != nil {
			return 0, err
		}
		if lo > hi {
			return 0, &Error{Field: f.name, Value: item, Reason: fmt.Sprintf("range is reversed (%d > %d)", lo, hi)}
		}
	default:
		v, err := parseValue(rangePart, f, item)
		if err != nil {
			return 0, err
		}
		lo = v
		if !hasStep {
			hi = v
		}
	}
	var bits uint64
	for v := lo; v <= hi; v += step {
		bits |= 1 << uint(v)
	}
	return bits, nil
}

func parseValue(text string, f field, item string) (int, error) {
	if text == "" {
		return 0, &Error{Field: f.name, Value: item, Reason: "missing value"}
	}
	if v, ok := f.names[strings.ToLower(text)]; ok && len(text) == 3 {
		return v, nil
	}
	if !isDigits(text) {
		if f.names != nil {
			return 0, &Error{Field: f.name, Value: text, Reason: "unknown name or not a number"}
		}
		return 0, &Error{Field: f.name, Value: text, Reason: "not a number"}
	}
	v, err := strconv.Atoi(text)
	if err != nil || v < f.min || v > f.max {
		return 0, &Error{Field: f.name, Value: text, Reason: fmt.Sprintf("out of range %d-%d", f.min, f.max)}
	}
	return v, nil
}

// isName reports whether item consists only of names valid for f (so "wed"
// is not mistaken for the Quartz "W").
func isName(item string, f field) bool {
	if f.names == nil {
		return false
	}
	for _, p := range strings.FieldsFunc(item, func(r rune) bool { return r == '-' || r == '/' }) {
		if _, ok := f.names[strings.ToLower(p)]; !ok && !isDigits(p) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" || len(s) > 4 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// maxDays is the largest day of each month in any year (February: 29).
var maxDays = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// canFire reports whether some day can ever match. Only a restricted
// day-of-month with an unrestricted day-of-week can be impossible
// ("0 0 31 2 *"); when both are restricted cronie ORs them.
func (s *Schedule) canFire() bool {
	if s.dom == 0 || s.month == 0 || s.minute == 0 || s.hour == 0 || s.dow == 0 {
		return false
	}
	if !s.dowStar && !s.domStar {
		return true
	}
	for m := 1; m <= 12; m++ {
		if s.month&(1<<m) != 0 && s.dom&((1<<(maxDays[m]+1))-1) != 0 {
			return true
		}
	}
	return false
}
