//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// TestFailingRunKeepsItsOutputTail: on a booted node a failing command's
// last lines (stdout and stderr, in order, the last 4 KiB from a line's
// start) are stored with its run, while the whole output still reaches
// the unit's journal under the run's invocation, the field log shipping
// and the logs API's run= select by.
func TestFailingRunKeepsItsOutputTail(t *testing.T) {
	const node = "node1"
	// About 6 KiB: more than the tail keeps.
	job := c.NewJob(t, "acme", "0 3 29 2 *",
		`i=0; while [ $i -lt 300 ]; do echo "progress line $i"; i=$((i+1)); done; echo "Error: cannot reach the database" >&2; exit 3`, 60, 64, 5)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })

	run := runNowAndWait(t, node, job, 1, 60*time.Second)
	if run.Result != wire.ResultExitCode || run.ExitCode == nil || *run.ExitCode != 3 {
		t.Fatalf("run recorded %s (exit %v), want exit_code 3", run.Result, run.ExitCode)
	}
	detail, err := c.Store.GetRun(t.Context(), job.ID, 0, fmt.Sprintf("%s#manual#1", job.ID))
	if err != nil {
		t.Fatal(err)
	}
	if detail.OutputTail == nil {
		t.Fatal("the run has no output tail")
	}
	tail := *detail.OutputTail
	if !strings.HasSuffix(tail, "progress line 299\nError: cannot reach the database\n") ||
		!strings.HasPrefix(tail, "progress line ") || len(tail) > wire.MaxOutputTail || len(tail) < wire.MaxOutputTail-40 {
		t.Errorf("tail of %d bytes, want the last 4 KiB from a line start ending with the error:\n%s", len(tail), tail)
	}
	if detail.OutputTruncated || detail.OutputDroppedBytes != 0 {
		t.Errorf("output truncated %v, %d bytes dropped: nothing was over the bounds", detail.OutputTruncated, detail.OutputDroppedBytes)
	}

	if !wire.ValidInvocationID(run.InvocationID) {
		t.Fatalf("run invocation %q", run.InvocationID)
	}
	complete := func(s string) bool { return strings.Contains(s, "Error: cannot reach the database") }
	journal(t, node, job, complete)
	// Field matches only (ANDed): -u would add an OR of unit fields.
	out, err := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-o", "cat", "_SYSTEMD_UNIT="+job.UnitName()+".service",
		"_SYSTEMD_INVOCATION_ID="+run.InvocationID, "SYSLOG_IDENTIFIER="+job.UnitName())
	if err != nil {
		t.Fatalf("journalctl: %v %s", err, out)
	}
	if !strings.Contains(out, "progress line 0\nprogress line 1\n") || !complete(out) {
		t.Errorf("the run's journal lines (by its invocation and identifier) lack its output:\n%.2000s", out)
	}
}
