//go:build e2e

package faults

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// witnessCommand appends "{node} {run key}" to file (relative to the
// webroot) and then runs rest.
func witnessCommand(file, rest string) string {
	cmd := `echo "$(hostname) $HOSTCRON_RUN_KEY" >> ` + file
	if rest != "" {
		cmd += "; " + rest
	}
	return cmd
}

// execution is one line of a witness file.
type execution struct {
	Node string
	Key  runkey.Key
}

// readWitness parses a witness file; a line that is not "node key" fails
// the test (the command did not see its run key).
func readWitness(t *testing.T, path string) []execution {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []execution
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		node, key, ok := strings.Cut(line, " ")
		k, err := runkey.Parse(key)
		if !ok || err != nil {
			t.Fatalf("witness line %q: %v", line, err)
		}
		out = append(out, execution{Node: node, Key: k})
	}
	return out
}

// realResult reports whether a result means the command ran.
func realResult(r wire.Result) bool {
	switch r {
	case wire.ResultSuccess, wire.ResultExitCode, wire.ResultSignal, wire.ResultTimeout, wire.ResultOOM:
		return true
	}
	return false
}

// checkExactlyOnce compares a witness with the run history: no run key ran
// twice, every execution has a real result under its own key, and every
// real result was witnessed. It returns the runs by key.
func checkExactlyOnce(t *testing.T, execs []execution, runs []store.Run) map[string]store.Run {
	t.Helper()
	byKey := map[string]store.Run{}
	for _, r := range runs {
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
		case !realResult(r.Result):
			t.Errorf("%s ran on %s but is recorded as %s (%s)", key, e.Node, r.Result, r.FailureReason)
		}
	}
	for key, r := range byKey {
		if realResult(r.Result) && seen[key] == "" {
			t.Errorf("%s is recorded as %s but never ran", key, r.Result)
		}
	}
	return byKey
}

// applyAll applies jobs on every node with the node agent.
func applyAll(t *testing.T, jobs ...wire.Job) {
	t.Helper()
	for _, n := range c.Nodes {
		c.Agent(t, n, jobs, nil, "apply")
	}
}

// desired reads a job back from the store as nodes must have it.
func desired(t *testing.T, id string) wire.Job {
	t.Helper()
	d, _, err := c.Store.DesiredJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// disableEverywhere disables a job in the store and on every node, then
// waits for a run in flight to report.
func disableEverywhere(t *testing.T, id string, settle time.Duration) {
	t.Helper()
	if _, err := c.Store.DisableJob(context.Background(), id, 0); err != nil {
		t.Fatal(err)
	}
	applyAll(t, desired(t, id))
	time.Sleep(settle)
}

// runsBySlot lists a job's runs oldest slot first.
func runsBySlot(t *testing.T, id string) []store.Run {
	t.Helper()
	runs, err := c.Store.ListRuns(context.Background(), id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ScheduledAt.Before(runs[j].ScheduledAt) })
	return runs
}

// untilNextSlot sleeps until offset after the next multiple of every.
func untilNextSlot(every, offset time.Duration) {
	now := time.Now()
	next := now.Truncate(every).Add(offset)
	for !next.After(now) {
		next = next.Add(every)
	}
	time.Sleep(time.Until(next))
}

// dumpOnFailure logs, when the test fails, what each node's journal says
// about the job's units: the runner's decisions are there, one line each.
func dumpOnFailure(t *testing.T, unit string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range c.Nodes {
			out, _ := c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "short-precise", "-n", "150", "-u", unit+".service", "-u", unit+".timer")
			t.Logf("journal of %s on %s:\n%s", unit, n, out)
		}
	})
}
