package jobspec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of a job's environment. The desired set of a whole shard travels
// through Temporal in one payload (2 MB limit, docs/semantics.md), so a
// job's environment is kept well below a page of a crontab's worth.
const (
	MaxEnvEntries    = 32
	MaxEnvValueBytes = 4096
	// MaxEnvTotalBytes bounds the sum of len(name)+len(value)+2 (the
	// "=" and the NUL of the process's environment block) over entries.
	MaxEnvTotalBytes = 8192
	// MaxEnvEncodedBytes bounds the map as JSON, the size it has in the
	// shard's desired set: JSON escapes '<', '>', '&' and control bytes
	// to six bytes each, so raw bytes alone would let a job take six
	// times its share of Temporal's 2 MB (review).
	MaxEnvEncodedBytes = 12288
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// refusedEnvNames change how the dynamic loader, glibc or the shell that
// runs the command behave before the tenant's first line runs (glibc's
// "unsecure" variables, sysdeps/generic/unsecvars.h, and the shells'
// startup variables), or are the runner's own plumbing. The command runs
// as the tenant, so none of this crosses a privilege boundary today; they
// are refused so that the runner's shell and the job's run keep one
// meaning whatever a spec says (defence in depth for a core or spec
// file that is not what it should be). TMPDIR, on glibc's list too, is
// allowed: tenants commonly set it and it only names a directory.
var refusedEnvNames = map[string]string{
	"GCONV_PATH":            "changes which code glibc loads",
	"GETCONF_DIR":           "changes which code glibc loads",
	"GLIBC_TUNABLES":        "changes how glibc behaves",
	"HOSTALIASES":           "changes how glibc resolves names",
	"LOCALDOMAIN":           "changes how glibc resolves names",
	"LOCPATH":               "changes which files glibc loads",
	"NIS_PATH":              "changes how glibc resolves names",
	"NLSPATH":               "changes which files glibc loads",
	"RESOLV_HOST_CONF":      "changes how glibc resolves names",
	"RES_OPTIONS":           "changes how glibc resolves names",
	"TZDIR":                 "changes which files glibc loads",
	"BASH_ENV":              "makes the shell run a file before the command",
	"ENV":                   "makes the shell run a file before the command",
	"SHELLOPTS":             "changes how the shell runs the command",
	"BASHOPTS":              "changes how the shell runs the command",
	"PS4":                   "changes how the shell runs the command",
	"IFS":                   "changes how the shell runs the command",
	"CREDENTIALS_DIRECTORY": "is the runner's own",
	"RUNTIME_DIRECTORY":     "is the runner's own",
	// USER and LOGNAME name the identity the command runs as (systemd
	// sets them from User=); a script must be able to trust them.
	"USER":    "names the user the command runs as",
	"LOGNAME": "names the user the command runs as",
}

// refusedEnvPrefixes are refused families: the runner's HOSTCRON_
// variables, the dynamic loader's LD_ and glibc malloc's MALLOC_.
var refusedEnvPrefixes = []struct{ prefix, why string }{
	{"HOSTCRON_", "is the runner's own"},
	{"LD_", "changes which code the dynamic loader loads"},
	{"MALLOC_", "changes how glibc behaves"},
}

// RefusedEnvName says why a variable name may not be set by a job ("" if
// it may). It does not check the name's syntax (see ValidateEnvironment).
func RefusedEnvName(name string) string {
	if why, ok := refusedEnvNames[name]; ok {
		return why
	}
	for _, p := range refusedEnvPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.why
		}
	}
	return ""
}

// EnvError is a refused environment: Name is the offending variable (""
// when the error is about the whole map).
type EnvError struct {
	Name   string
	Reason string
}

func (e *EnvError) Error() string {
	if e.Name == "" {
		return e.Reason
	}
	return fmt.Sprintf("%q %s", e.Name, e.Reason)
}

// ValidateEnvironment checks a job's variables: names of letters, digits
// and '_' (not starting with a digit, at most 128), none refused
// (RefusedEnvName); values valid UTF-8 without NUL (a NUL ends a variable
// in the process's environment block) or other control characters but
// tab and newline, each at most MaxEnvValueBytes; at most MaxEnvEntries,
// MaxEnvTotalBytes in all and MaxEnvEncodedBytes as JSON. Names are checked in
// sorted order so the error is the same for the same map.
func ValidateEnvironment(env map[string]string) error {
	if len(env) > MaxEnvEntries {
		return &EnvError{Reason: fmt.Sprintf("has %d variables, at most %d allowed", len(env), MaxEnvEntries)}
	}
	total := 0
	for _, name := range SortedEnvNames(env) {
		if err := ValidateEnvVar(name, env[name]); err != nil {
			return err
		}
		total += len(name) + len(env[name]) + 2
	}
	if total > MaxEnvTotalBytes {
		return &EnvError{Reason: fmt.Sprintf("is %d bytes (names, values and 2 per variable), at most %d allowed", total, MaxEnvTotalBytes)}
	}
	if b, err := json.Marshal(env); err != nil || len(b) > MaxEnvEncodedBytes {
		return &EnvError{Reason: fmt.Sprintf("is %d bytes as JSON (special characters count six), at most %d allowed", len(b), MaxEnvEncodedBytes)}
	}
	return nil
}

// ValidateEnvVar checks one variable: its name's syntax, a name not
// refused, and its value (UTF-8, no NUL or control characters but tab and
// newline, at most MaxEnvValueBytes).
func ValidateEnvVar(name, value string) error {
	switch {
	case !envNameRE.MatchString(name):
		return &EnvError{Name: name, Reason: "is not a valid name: letters, digits and '_', not starting with a digit, at most 128"}
	case RefusedEnvName(name) != "":
		return &EnvError{Name: name, Reason: "may not be set: it " + RefusedEnvName(name)}
	case !utf8.ValidString(value):
		return &EnvError{Name: name, Reason: "has a value that is not valid UTF-8"}
	case strings.IndexByte(value, 0) >= 0:
		return &EnvError{Name: name, Reason: "has a value with a NUL byte"}
	case strings.IndexFunc(value, isControl) >= 0:
		return &EnvError{Name: name, Reason: "has a value with a control character (only tab and newline are allowed)"}
	case len(value) > MaxEnvValueBytes:
		return &EnvError{Name: name, Reason: fmt.Sprintf("has a value of %d bytes, at most %d allowed", len(value), MaxEnvValueBytes)}
	}
	return nil
}

// isControl is a C0 control or DEL other than tab and newline: nothing a
// value needs, and each costs six bytes in JSON.
func isControl(r rune) bool { return (r < 0x20 && r != '\t' && r != '\n') || r == 0x7f }

// SortedEnvNames are the map's names in order.
func SortedEnvNames(env map[string]string) []string {
	names := make([]string, 0, len(env))
	for n := range env {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
