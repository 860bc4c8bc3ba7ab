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
// U+FFFD), control characters other than newline and tab (C0, DEL, C1)
// each a '?', at most MaxOutputTail bytes, taken from the end. When b had
// to be cut, or cut is set (b is itself the end of a longer output), a
// partial first line is left out as long as a whole line follows it. The
// runner, cron-outcome (on a record the tenant can rewrite) and the tests
// apply the same rule. The control characters go because JSON escapes
// each in six bytes: a tail of them would be six times its size in every
// report and in the node's outcome spool; now no byte of a tail grows
// more than twice in JSON (written without HTML escaping). The API refuses only what
// PostgreSQL cannot store (ValidOutputTail), so an older node's tail with
// control characters is still taken.
func OutputTail(b []byte, cut bool) string {
	clean := bytes.ToValidUTF8(b, []byte("\uFFFD"))
	clean = bytes.ReplaceAll(clean, []byte{0}, []byte("\uFFFD"))
	clean = bytes.Map(visible, clean)
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

// ValidOutputTail reports whether the core takes s as a tail: at most
// MaxOutputTail bytes of UTF-8 without NUL. Looser than OutputTail, which
// also replaces control characters: an older node's tail keeps them.
func ValidOutputTail(s string) bool {
	return len(s) <= MaxOutputTail && utf8.ValidString(s) && !bytes.Contains([]byte(s), []byte{0})
}

// visible replaces a control character (C0 but newline and tab, DEL, C1)
// by '?': one byte, which JSON does not escape.
func visible(r rune) rune {
	if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
		return '?'
	}
	return r
}
