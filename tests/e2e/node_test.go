//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestUnitsAndReconcile: an agent call puts the units on every node
// (no daemon-reload: systemd has never loaded them, it loads them when
// they start); a repeated call changes nothing; reconcile removes an
// orphan and disables a disabled job with one daemon-reload.
func TestUnitsAndReconcile(t *testing.T) {
	a := c.NewJob(t, "acme", "0 3 29 2 *", "echo a", 60, 64, 5)
	b := c.NewJob(t, "acme", "0 4 29 2 *", "echo b", 60, 64, 5)
	cj := c.NewJob(t, "globex", "0 5 29 2 *", "echo c", 60, 64, 5)
	jobs := []wire.Job{a, b, cj}
	for _, n := range c.Nodes {
		var rep wire.NodeReport
		c.Agent(t, n, jobs, &rep, "apply")
		if len(rep.Written) != 6 || rep.Reloads != 0 || len(rep.Enabled) != 3 || len(rep.Failed) != 0 {
			t.Errorf("%s: first apply %+v", n, rep)
		}
		st := c.State(t, n)
		for _, j := range jobs {
			if s := st[j.UnitName()]; !s.TimerEnabled || !s.TimerActive || s.NextElapseUS == 0 || s.Hash == "" {
				t.Errorf("%s: %s state %+v", n, j.UnitName(), s)
			}
		}
		c.Agent(t, n, jobs, &rep, "apply")
		if rep.Changed() || rep.Reloads != 0 {
			t.Errorf("%s: unchanged apply changed something: %+v", n, rep)
		}
	}
	b.Enabled = false
	var rep wire.NodeReport
	c.Agent(t, "node1", []wire.Job{a, b}, &rep, "reconcile")
	if rep.Reloads != 1 || strings.Join(rep.Removed, ",") != cj.UnitName() || strings.Join(rep.Disabled, ",") != b.UnitName()+".timer" {
		t.Errorf("reconcile report %+v", rep)
	}
	st := c.State(t, "node1")
	if _, ok := st[cj.UnitName()]; ok {
		t.Errorf("orphan %s still there", cj.UnitName())
	}
	if s := st[b.UnitName()]; s.TimerEnabled || s.TimerActive {
		t.Errorf("disabled job's timer: %+v", s)
	}
	if s := st[a.UnitName()]; !s.TimerActive {
		t.Errorf("kept job's timer: %+v", s)
	}
	root := c.Root("node1")
	for _, p := range []string{"etc/systemd/system/" + cj.UnitName() + ".timer", "etc/systemd/system/" + cj.UnitName() + ".service", "var/lib/hostcron/jobs/" + cj.UnitName() + ".json"} {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			t.Errorf("orphan file %s left", p)
		}
	}
	// Writing, enabling, rewriting and disabling never ran a job off its
	// schedule (29 February only): no node started any of the services.
	for _, n := range c.Nodes {
		for _, j := range jobs {
			out, _ := c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1", "UNIT="+j.UnitName()+".service")
			if strings.Contains(out, "Starting") {
				t.Errorf("%s: %s started off its schedule:\n%s", n, j.UnitName(), out)
			}
		}
	}
	// Leave the nodes empty for the tests that follow.
	for _, n := range c.Nodes {
		c.Agent(t, n, []wire.Job{}, &rep, "reconcile")
		if len(c.State(t, n)) != 0 {
			t.Errorf("%s: units left after reconcile to nothing", n)
		}
	}
}

// TestNewUnitsStartInOneTransaction: enough new jobs for the agent to
// start their timers in one transaction (unitmgr.startTogether), on units
// systemd has never loaded, so no daemon-reload: every enabled job's
// timer is active with a next elapse, systemd holds none of the files as
// changed (NeedDaemonReload=no), the disabled job's timer never started,
// and the transient unit of the transaction is gone.
func TestNewUnitsStartInOneTransaction(t *testing.T) {
	var jobs []wire.Job
	for i := range 9 {
		jobs = append(jobs, c.NewJob(t, "acme", fmt.Sprintf("%d 3 29 2 *", i), "echo x", 60, 64, 5))
	}
	off := c.NewJob(t, "acme", "0 6 29 2 *", "echo off", 60, 64, 5)
	off.Enabled = false
	var rep wire.NodeReport
	c.Agent(t, "node1", append(slices.Clone(jobs), off), &rep, "apply")
	if rep.Reloads != 0 || len(rep.Enabled) != len(jobs) || len(rep.Failed) != 0 {
		t.Errorf("apply %+v", rep)
	}
	st := c.State(t, "node1")
	for _, j := range jobs {
		if s := st[j.UnitName()]; !s.TimerEnabled || !s.TimerActive || s.NextElapseUS == 0 {
			t.Errorf("%s state %+v", j.UnitName(), s)
		}
		out, err := c.Exec("node1", nil, "systemctl", "show", "-p", "NeedDaemonReload", "--value", j.UnitName()+".timer", j.UnitName()+".service")
		if err != nil || strings.Join(strings.Fields(out), " ") != "no no" {
			t.Errorf("%s NeedDaemonReload %q %v", j.UnitName(), out, err)
		}
	}
	if s := st[off.UnitName()]; s.TimerActive {
		t.Errorf("disabled job's timer started: %+v", s)
	}
	// The transaction ran (systemd logged its transient unit), rather
	// than the one-by-one fallback.
	if out, _ := c.Exec("node1", nil, "journalctl", "-q", "--no-pager", "-o", "cat", "_PID=1"); !strings.Contains(out, fmt.Sprintf("start %d timers", len(jobs))) {
		t.Errorf("no transaction of %d starts in PID 1's journal", len(jobs))
	}
	if out, _ := c.Exec("node1", nil, "systemctl", "list-units", "--all", "--plain", "--no-legend", "hostcron-start-*"); strings.TrimSpace(out) != "" {
		t.Errorf("transient start unit left: %q", out)
	}
	c.Agent(t, "node1", []wire.Job{}, &rep, "reconcile")
	if len(c.State(t, "node1")) != 0 {
		t.Errorf("units left after reconcile to nothing")
	}
}

// TestExactlyOncePerSlot runs a 10-second schedule on three nodes, random
// delay on, for 31 slots: each slot runs exactly once on the shard, no slot
// is missed, and the output is in journald under the job's identifier.
func TestExactlyOncePerSlot(t *testing.T) {
	t.Parallel()
	const slots = 31
	marker := filepath.Join(c.Shared, "www/acme/public/runs.log")
	job := c.NewJob(t, "acme", "*/10 * * * * *", `echo "ran on $(hostname)"; echo "$(hostname)" >> runs.log; sleep 1`, 30, 64, 5)
	for _, n := range c.Nodes {
		c.Agent(t, n, []wire.Job{job}, nil, "apply")
	}
	start := time.Now()
	runs := c.WaitRuns(t, job.ID, slots*10*time.Second+90*time.Second, func(r []store.Run) bool { return len(r) >= slots })
	job.Enabled = false
	for _, n := range c.Nodes {
		c.Agent(t, n, []wire.Job{job}, nil, "apply")
	}
	time.Sleep(3 * time.Second) // a run started before the disable reports
	runs, _ = c.Store.ListRuns(t.Context(), job.ID, 1000)
	sort.Slice(runs, func(i, j int) bool { return runs[i].ScheduledAt.Before(runs[j].ScheduledAt) })
	perNode := map[string]int{}
	for i, r := range runs {
		if r.Result != "success" {
			t.Errorf("slot %s: %s %s", r.ScheduledAt, r.Result, r.FailureReason)
		}
		if i > 0 && r.ScheduledAt.Sub(runs[i-1].ScheduledAt) != 10*time.Second {
			t.Errorf("gap between slots %s and %s", runs[i-1].ScheduledAt, r.ScheduledAt)
		}
		if r.NodeID != nil {
			perNode[*r.NodeID]++
		}
	}
	lines, _ := os.ReadFile(marker)
	executions := strings.Count(string(lines), "\n")
	if executions != len(runs) {
		t.Errorf("%d executions for %d recorded slots: a slot ran twice or a run went unreported", executions, len(runs))
	}
	t.Logf("%d slots in %v, %d executions, runs per node %v", len(runs), time.Since(start).Round(time.Second), executions, perNode)

	// journald: every execution's output, under the unit's identifier and
	// the tenant and job fields the unit sets.
	found := 0
	for _, n := range c.Nodes {
		out, err := c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "json", "SYSLOG_IDENTIFIER="+job.UnitName())
		if err != nil {
			t.Fatalf("journalctl on %s: %v %s", n, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				continue
			}
			if msg, _ := e["MESSAGE"].(string); msg == "ran on "+n {
				found++
				if e["HOSTCRON_TENANT"] != "acme" || e["HOSTCRON_CRON_JOB_ID"] != job.ID {
					t.Errorf("journal entry lacks the job's fields: %v", e)
				}
			}
		}
	}
	if found != executions {
		t.Errorf("journald has %d run lines, want %d", found, executions)
	}
}

// TestFailureClassification: a failing command, a timeout and a memory
// kill are each reported as such.
func TestFailureClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		command        string
		timeout, memMB int
		want           wire.Result
	}{
		{"echo failing; exit 3", 30, 64, "exit_code"},
		{"sleep 30", 4, 64, "timeout"},
		{`x=$(head -c 200000000 /dev/zero | tr '\0' x); echo survived`, 30, 32, "oom"},
		{"exit 75", 30, 64, "exit_code"},
	}
	var jobs []wire.Job
	for _, tc := range cases {
		jobs = append(jobs, c.NewJob(t, "globex", "*/10 * * * * *", tc.command, tc.timeout, tc.memMB, 0))
	}
	for _, n := range c.Nodes {
		c.Agent(t, n, jobs, nil, "apply")
	}
	for i, tc := range cases {
		runs := c.WaitRuns(t, jobs[i].ID, 90*time.Second, func(r []store.Run) bool {
			n := 0
			for _, x := range r {
				n += b2i(x.Result == tc.want)
			}
			return len(r) >= 2 && n >= 1
		})
		for _, r := range runs {
			// A runner systemd started so late (a loaded test host) that
			// the timeout ran out before the command began is the
			// platform's fault, and says so; every other run must be
			// what the command did.
			if r.Result != tc.want && !(r.Result == wire.ResultPlatformError && strings.Contains(r.FailureReason, "before the command started")) {
				t.Errorf("%q: result %s (%s), want %s", tc.command, r.Result, r.FailureReason, tc.want)
			}
		}
		var ran store.Run // a run the command itself ended
		for _, r := range runs {
			if r.Result == tc.want {
				ran = r
				break
			}
		}
		if tc.want == "exit_code" && ran.ExitCode == nil {
			t.Errorf("%q: no exit code recorded", tc.command)
		} else if strings.HasPrefix(tc.command, "exit 75") && *ran.ExitCode != 75 {
			t.Errorf("own exit 75 recorded as %d", *ran.ExitCode)
		}
	}
	for _, n := range c.Nodes {
		var names []string
		for _, j := range jobs {
			names = append(names, j.UnitName())
		}
		c.Agent(t, n, nil, nil, append([]string{"remove"}, names...)...)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
