package schedule

import "testing"

// TestOnlySpaceAndTabSeparate: exotic whitespace that Go's strings.Fields
// would treat as a separator is refused, so what a reviewer reads as one
// field never parses as two.
func TestOnlySpaceAndTabSeparate(t *testing.T) {
	for _, sep := range []string{"\v", "\f", "\u0085", "\u00a0", "\u2028", "\u2029", "\u3000", "\x00"} {
		if _, err := Parse("*/5"+sep+"* * * *", "UTC"); err == nil {
			t.Errorf("separator %q accepted", sep)
		}
		if _, err := Parse(sep+"*/5 * * * *"+sep, "UTC"); err == nil {
			t.Errorf("surrounding %q accepted", sep)
		}
	}
	if _, err := Parse("*/5\n* * * *", "UTC"); err == nil {
		t.Error("inner newline accepted")
	}
	for _, ok := range []string{"*/5 * * * *", "*/5\t*  *\t* *", "  */5 * * * *\t", "@daily", " @hourly "} {
		if _, err := Parse(ok, "UTC"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

func TestRightAndPosixZonesRefused(t *testing.T) {
	for _, z := range []string{"right/Europe/Berlin", "posix/Europe/Berlin", "right/UTC", "posix/America/New_York"} {
		if _, err := LoadZone(z); err == nil {
			t.Errorf("zone %s accepted", z)
		}
	}
	if _, err := LoadZone("Europe/Berlin"); err != nil {
		t.Error(err)
	}
}
