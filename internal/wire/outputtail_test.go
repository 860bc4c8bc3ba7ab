package wire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOutputTail(t *testing.T) {
	long := strings.Repeat("a", 100) + "\n" + strings.Repeat("b", MaxOutputTail-20) + "\nlast line\n"
	for _, tc := range []struct {
		name string
		in   string
		cut  bool
		want string
	}{
		{"short output as is", "one\ntwo\n", false, "one\ntwo\n"},
		{"empty", "", false, ""},
		{"no trailing newline kept", "one\ntwo", false, "one\ntwo"},
		{"cut input drops its partial first line", "tial line\nwhole\n", true, "whole\n"},
		{"cut input of one line keeps it", "tial line without end", true, "tial line without end"},
		{"cut input whose only newline ends it keeps it", "tial line\n", true, "tial line\n"},
		{"long output keeps the end from a line start", long, false, strings.Repeat("b", MaxOutputTail-20) + "\nlast line\n"},
		{"invalid UTF-8 replaced", "ok \xff\xfe done\n", false, "ok \uFFFD done\n"},
		{"NUL replaced", "a\x00b\n", false, "a\uFFFDb\n"},
		{"control characters one '?' each, newline and tab kept", "\x1b[31mred\r\n\tx\x7f\u0085\u009f\u00a0\n", false, "?[31mred?\n\tx???\u00a0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OutputTail([]byte(tc.in), tc.cut)
			if got != tc.want {
				t.Errorf("OutputTail(%.40q…, %v) = %.40q… (%d bytes), want %.40q… (%d bytes)", tc.in, tc.cut, got, len(got), tc.want, len(tc.want))
			}
			if !ValidOutputTail(got) {
				t.Errorf("OutputTail(%q) = %q, which ValidOutputTail refuses", tc.in, got)
			}
		})
	}
}

// A tail cut inside a multi-byte rune and made of invalid bytes still
// comes out as valid UTF-8 within the bound, however the input grows when
// invalid bytes become U+FFFD (3 bytes each).
func TestOutputTailOfHostileBytes(t *testing.T) {
	for _, in := range []string{
		strings.Repeat("\xffa", 2*MaxOutputTail), // each \xff grows to 3 bytes
		strings.Repeat("é", MaxOutputTail),       // 2 bytes each: a cut may land mid-rune
		"x" + strings.Repeat("é", MaxOutputTail),
		strings.Repeat("\x00", MaxOutputTail+1),
	} {
		got := OutputTail([]byte(in), false)
		if !ValidOutputTail(got) || len(got) < MaxOutputTail-utf8.UTFMax {
			t.Errorf("OutputTail of %d hostile bytes: %d bytes, valid %v", len(in), len(got), ValidOutputTail(got))
		}
	}
	for s, want := range map[string]bool{"ok\n": true, "a\x00": false, "\xff": false, strings.Repeat("a", MaxOutputTail+1): false} {
		if got := ValidOutputTail(s); got != want {
			t.Errorf("ValidOutputTail(%q) = %v, want %v", s, got, want)
		}
	}
}
