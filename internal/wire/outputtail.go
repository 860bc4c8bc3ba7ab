package wire

import (
	"bytes"
	"unicode/utf8"
)

// MaxOutputTail is how much of a run's output its record keeps: the last
// 4 KiB, enough for the error a failing command ends with.
const MaxOutputTail = 4096

// OutputTail is the stored form of the end of a run's output b: valid
// UTF-8 (invalid bytes and NUL, which PostgreSQL's text refuses, become
// U+FFFD), at most MaxOutputTail bytes, taken from the end. When b had to
// be cut, or cut is set (b is itself the end of a longer output), a
// partial first line is left out as long as a whole line follows it. The
// runner, cron-outcome (on a record the tenant can rewrite) and the tests
// apply the same rule; the API refuses a tail this function would change.
func OutputTail(b []byte, cut bool) string {
	clean := bytes.ToValidUTF8(b, []byte("\uFFFD"))
	clean = bytes.ReplaceAll(clean, []byte{0}, []byte("\uFFFD"))
	if len(clean) > MaxOutputTail {
		clean, cut = clean[len(clean)-MaxOutputTail:], true
		for len(clean) > 0 && !utf8.RuneStart(clean[0]) {
			clean = clean[1:]
		}
	}
	if cut {
		if i := bytes.IndexByte(clean, '\n'); i >= 0 && i+1 < len(clean) {
			clean = clean[i+1:]
		}
	}
	return string(clean)
}

// ValidOutputTail reports whether s is a tail OutputTail could have made:
// at most MaxOutputTail bytes of UTF-8 without NUL.
func ValidOutputTail(s string) bool {
	return len(s) <= MaxOutputTail && utf8.ValidString(s) && !bytes.Contains([]byte(s), []byte{0})
}
