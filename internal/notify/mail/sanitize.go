package mail

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// oneLine makes tenant text fit on one line of a header or a body field:
// invalid UTF-8 becomes U+FFFD, a tab becomes a space and every other control
// or line-separator character is shown escaped (\x0a), so a forged "header"
// or body line stays visible as text instead of being interpreted. The result
// is cut to max runes, because a subject must stay well under the 998-octet
// line limit even after encoding.
func oneLine(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if n == max {
			b.WriteString("…")
			break
		}
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case isBreaking(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteRune(r)
		}
		n++
	}
	return b.String()
}

// multiLine keeps the line structure of tenant text (command output) but
// turns CRLF and bare CR into LF and escapes every other control character:
// ANSI escapes and NULs would otherwise reach the reader's terminal or mail
// client as they are.
func multiLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case isBreaking(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isBreaking reports a rune that must not appear raw in a line: C0/C1
// controls, DEL and the Unicode line and paragraph separators (which some
// mail clients render as a line break).
func isBreaking(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029'
}

func escapeRune(r rune) string {
	if r < 0x100 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// headerText is the last guard before a value goes into a header: whatever
// the caller passed, no control character survives (they become spaces).
func headerText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == max {
			b.WriteString("…")
			break
		}
		if isBreaking(r) {
			r = ' '
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// isASCII reports whether s needs no SMTPUTF8.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
