package schedule

import (
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // a zone database even where the host has none
)

// zoneName is the shape of an IANA "Area/Location" name. It also keeps a zone
// name safe to put into a unit file: no spaces, quotes, '%' or '..'.
var zoneName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9][A-Za-z0-9_+-]*){1,2}$`)

// LoadZone resolves an IANA zone name. "" and "UTC" mean UTC. Fixed
// offsets ("+02:00", "Etc/GMT-2"), abbreviations ("CET", "EST") and the
// POSIX-style legacy names ("EST5EDT") are rejected: they do not carry the
// DST rules a tenant means.
func LoadZone(name string) (*time.Location, error) {
	switch name {
	case "", "UTC", "Etc/UTC":
		return time.UTC, nil
	}
	bad := func(reason string) error { return &Error{Field: "timezone", Value: name, Reason: reason} }
	if !zoneName.MatchString(name) {
		return nil, bad("must be an IANA zone name such as Europe/Berlin; offsets and abbreviations are not accepted")
	}
	if strings.HasPrefix(name, "Etc/") || strings.HasPrefix(name, "SystemV/") {
		return nil, bad("fixed-offset zones are not accepted; use a region name such as Europe/Berlin")
	}
	// right/ zones count leap seconds (their clock is not the system's) and
	// posix/ duplicates the plain names; systemd may not resolve either
	// the way Go does, so next_run_at could disagree with the timer.
	if strings.HasPrefix(name, "right/") || strings.HasPrefix(name, "posix/") {
		return nil, bad("right/ and posix/ zones are not accepted; use the plain name such as Europe/Berlin")
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, bad("unknown time zone")
	}
	return loc, nil
}

// ZoneName is the name systemd needs after an OnCalendar value.
func ZoneName(loc *time.Location) string {
	if loc == nil || loc == time.UTC {
		return "UTC"
	}
	return loc.String()
}
