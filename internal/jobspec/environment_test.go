package jobspec

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestValidateEnvironment(t *testing.T) {
	many := map[string]string{}
	for i := 0; i < MaxEnvEntries+1; i++ {
		many["V"+strconv.Itoa(i)] = "x"
	}
	big := map[string]string{}
	for i := 0; i < 3; i++ { // 3 x (2+3000+2) > 8192
		big["V"+strconv.Itoa(i)] = strings.Repeat("x", 3000)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		badName string // "" with ok false: an error about the whole map
		ok      bool
	}{
		{"nil", nil, "", true},
		{"empty", map[string]string{}, "", true},
		{"plain", map[string]string{"GREETING": "hello world", "_x1": "", "PATH": "/usr/bin:/bin", "HOME": "/srv", "TMPDIR": "/tmp/x"}, "", true},
		{"unicode value", map[string]string{"A": "grüße ✓"}, "", true},
		{"newline in value", map[string]string{"A": "a\nb"}, "", true},
		{"128-char name", map[string]string{"A" + strings.Repeat("b", 127): "x"}, "", true},
		{"129-char name", map[string]string{"A" + strings.Repeat("b", 128): "x"}, "A" + strings.Repeat("b", 128), false},
		{"leading digit", map[string]string{"1A": "x"}, "1A", false},
		{"dash", map[string]string{"A-B": "x"}, "A-B", false},
		{"equals", map[string]string{"A=B": "x"}, "A=B", false},
		{"empty name", map[string]string{"": "x"}, "", false},
		{"hostcron", map[string]string{"HOSTCRON_SLOT": "x"}, "HOSTCRON_SLOT", false},
		{"ld_preload", map[string]string{"LD_PRELOAD": "/x.so"}, "LD_PRELOAD", false},
		{"ld_library_path", map[string]string{"LD_LIBRARY_PATH": "/x"}, "LD_LIBRARY_PATH", false},
		{"malloc", map[string]string{"MALLOC_ARENA_MAX": "2"}, "MALLOC_ARENA_MAX", false},
		{"bash_env", map[string]string{"BASH_ENV": "/x"}, "BASH_ENV", false},
		{"env", map[string]string{"ENV": "/x"}, "ENV", false},
		{"ifs", map[string]string{"IFS": ":"}, "IFS", false},
		{"tunables", map[string]string{"GLIBC_TUNABLES": "x"}, "GLIBC_TUNABLES", false},
		{"user", map[string]string{"USER": "root"}, "USER", false},
		{"case matters", map[string]string{"ld_preload": "x", "Path": "x"}, "", true},
		{"NUL", map[string]string{"A": "a\x00b"}, "A", false},
		{"bad UTF-8", map[string]string{"A": "\xff"}, "A", false},
		{"value at bound", map[string]string{"A": strings.Repeat("x", MaxEnvValueBytes)}, "", true},
		{"value over bound", map[string]string{"A": strings.Repeat("x", MaxEnvValueBytes+1)}, "A", false},
		{"too many", many, "", false},
		{"too big", big, "", false},
		{"first bad name in order", map[string]string{"Z-": "x", "A-": "x"}, "A-", false},
		// Review: JSON writes '<', '>', '&' as six bytes each, so raw size
		// alone let a job take six times its share of the desired set.
		{"tab in value", map[string]string{"A": "a\tb"}, "", true},
		{"control character", map[string]string{"A": "a\x01b"}, "A", false},
		{"escape", map[string]string{"A": "\x1b[2J"}, "A", false},
		{"DEL", map[string]string{"A": "a\x7f"}, "A", false},
		{"within raw bounds, too big as JSON", map[string]string{"A": strings.Repeat("<", 4000), "B": strings.Repeat(">", 4000)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateEnvironment(tc.env)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("got %v, want an *EnvError", err)
			}
			if ee.Name != tc.badName {
				t.Errorf("error names %q, want %q (%v)", ee.Name, tc.badName, err)
			}
		})
	}
}

func TestRefusedEnvName(t *testing.T) {
	for name, refused := range map[string]bool{
		"LD_AUDIT": true, "HOSTCRON_X": true, "SHELLOPTS": true, "PS4": true, "NLSPATH": true,
		"PATH": false, "HOME": false, "LANG": false, "TZ": false, "DB_PASSWORD": false, "LDAP_URI": false,
	} {
		if got := RefusedEnvName(name) != ""; got != refused {
			t.Errorf("RefusedEnvName(%q) refused=%v, want %v", name, got, refused)
		}
	}
}
