//go:build e2e

package harness

import (
	"os"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// The fault tiers check exactly-once against a witness that does not
// trust hostcron's own records: every command appends its node and run key
// ($HOSTCRON_RUN_KEY) to a file on the shared storage.

// WitnessCommand appends "{node} {run key}" to file (relative to the
// webroot) and then runs rest.
func WitnessCommand(file, rest string) string {
	cmd := `echo "$(hostname) $HOSTCRON_RUN_KEY" >> ` + file
	if rest != "" {
		cmd += "; " + rest
	}
	return cmd
}

// Execution is one line of a witness file.
type Execution struct {
	Node string
	Key  runkey.Key
}

// ReadWitness parses the witness file at path (a missing file is no
// executions); a line that is not "node key" fails the test (the command
// did not see its run key).
func ReadWitness(t testing.TB, path string) []Execution {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []Execution
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		node, key, ok := strings.Cut(line, " ")
		k, err := runkey.Parse(key)
		if !ok || err != nil {
			t.Fatalf("witness line %q: %v", line, err)
		}
		out = append(out, Execution{Node: node, Key: k})
	}
	return out
}

// RealResult reports whether a result means the command ran.
func RealResult(r wire.Result) bool {
	switch r {
	case wire.ResultSuccess, wire.ResultExitCode, wire.ResultSignal, wire.ResultTimeout, wire.ResultOOM:
		return true
	}
	return false
}

// CheckExactlyOnce compares a witness with the run history: no run key
// has two records or ran twice, every execution has a real result under
// its own key, and every real result was witnessed. It returns the runs
// by key.
func CheckExactlyOnce(t testing.TB, execs []Execution, runs []store.Run) map[string]store.Run {
	t.Helper()
	byKey := map[string]store.Run{}
	for _, r := range runs {
		if _, dup := byKey[r.RunKey]; dup {
			t.Errorf("%s has two run records", r.RunKey)
		}
		byKey[r.RunKey] = r
	}
	seen := map[string]string{}
	for _, e := range execs {
		key := e.Key.String()
		if prev, dup := seen[key]; dup {
			t.Errorf("%s ran twice: on %s and on %s", key, prev, e.Node)
		}
		seen[key] = e.Node
		r, ok := byKey[key]
		switch {
		case !ok:
			t.Errorf("%s ran on %s but has no run record", key, e.Node)
		case !RealResult(r.Result):
			t.Errorf("%s ran on %s but is recorded as %s (%s)", key, e.Node, r.Result, r.FailureReason)
		}
	}
	for key, r := range byKey {
		if RealResult(r.Result) && seen[key] == "" {
			t.Errorf("%s is recorded as %s but never ran", key, r.Result)
		}
	}
	return byKey
}
