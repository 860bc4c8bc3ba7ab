//go:build e2e && bench

// Package temporal measures a node's converge through the whole control
// path at scale: a shard of BENCH_CONVERGE_JOBS (10,000) jobs in
// PostgreSQL, a new booted node announcing itself, the converge workflow
// on the embedded Temporal server, the node reading its desired set in
// pages of the production size and reconciling. It prints a "BENCH" line;
// scripts/bench/converge.sh runs it. Not part of the test tier.
package temporal

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
	"github.com/hostcron/hostcron/workflows"
)

var c *harness.Cluster

func TestMain(m *testing.M) {
	// No node at start: the node under test joins a shard that already
	// holds every job, as a new or rebuilt web node does.
	os.Exit(harness.RunTests(m, "bench-converge", harness.Options{Nodes: 0, Temporal: true, NodeTimeout: time.Minute,
		DesiredPageSize: wire.DesiredPageSize}, func(k *harness.Cluster) { c = k }))
}

// TestConvergeShardOntoEmptyNode: how long the converge of a new node
// takes from the workflow's start to its end, and to how many enabled
// timers; then the same node's converge with nothing changed (its agent
// restarted, so it announces itself again); and the agent's peak RSS.
func TestConvergeShardOntoEmptyNode(t *testing.T) {
	n := envInt("BENCH_CONVERGE_JOBS", 10000)
	seed(t, n)
	if err := c.AddNodes("node1"); err != nil {
		t.Fatal(err)
	}
	first, res := convergeAfter(t, "")
	timers := 0
	for _, u := range c.State(t, "node1") {
		if u.TimerActive {
			timers++
		}
	}
	// The report names at most wire.MaxReportNames units a list; the
	// node's own state says how many timers it has. No daemon-reload:
	// systemd has never loaded the new node's units (unitmgr reloadStep).
	if res.Reloads != 0 || res.Jobs != n || timers != n {
		t.Fatalf("converge of %d jobs: %d in the set, %d reloads, %d active timers", n, res.Jobs, res.Reloads, timers)
	}
	hwm := agentPeakKB(t)
	printPhases(t, first.runID, "first")
	// The agent restarted, so it announces itself and converges with
	// nothing changed: in full the first time (which leaves the fast
	// path's stamp, as it planned nothing), then by the fast path; the
	// third time the core answers the digest from its cache, as for the
	// second node of a shard to ask or any periodic converge of a shard
	// at rest.
	noop := restartUnchanged(t, first.runID, "noop", n)
	hwmNoop := agentPeakKB(t)
	fast := restartUnchanged(t, noop.runID, "fast", n)
	hwmFast := agentPeakKB(t)
	cached := restartUnchanged(t, fast.runID, "fast_cached", n)
	fmt.Printf("BENCH temporal_converge jobs=%d converge_s=%.2f timers=%d noop_s=%.2f fast_s=%.2f fast_cached_s=%.2f agent_hwm_kb=%d agent_hwm_after_noop_kb=%d agent_hwm_after_fast_kb=%d\n",
		n, first.took.Seconds(), timers, noop.took.Seconds(), fast.took.Seconds(), cached.took.Seconds(), hwm, hwmNoop, hwmFast)
}

// restartUnchanged restarts node1's agent and returns the converge that
// follows the one of runID, failing the test if it wrote or reloaded
// anything or saw other than n jobs; its phases are printed as label.
func restartUnchanged(t *testing.T, runID, label string, n int) convergeRun {
	t.Helper()
	if _, err := c.Exec("node1", nil, "systemctl", "restart", "hostcron-node-agent"); err != nil {
		t.Fatal(err)
	}
	run, res := convergeAfter(t, runID)
	if len(res.Written) != 0 || res.Reloads != 0 || res.Jobs != n {
		t.Errorf("%s: converge with nothing changed: %d jobs, wrote %d files, %d reloads", label, res.Jobs, len(res.Written), res.Reloads)
	}
	printPhases(t, run.runID, label)
	return run
}

// seed stores n active jobs of acme that fire once a year (so none runs
// during the measurement), as the API would after creating them.
func seed(t *testing.T, n int) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	_, err := c.Store.Pool().Exec(context.Background(), `INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, command, working_directory,
			timeout_seconds, max_memory_mb, max_failures, status, swept_until, not_before, created_at)
		SELECT $1, $2, '17 3 1 1 *', 'true', '', 60, 64, 0, 'active', $3::timestamptz, $3::timestamptz, $3::timestamptz - interval '1 day' + g * interval '1 millisecond'
		FROM generate_series(1, $4) g`, c.Tenants["acme"].ID, c.Webroots["acme"].ID, now, n)
	if err != nil {
		t.Fatalf("seed %d jobs: %v", n, err)
	}
}

type convergeRun struct {
	runID string
	took  time.Duration
}

// convergeAfter waits for node1's converge run other than skip to close
// and returns it (start to close, by Temporal's own clock) and its result.
func convergeAfter(t *testing.T, skip string) (convergeRun, workflows.ConvergeResult) {
	t.Helper()
	id := workflows.ConvergeNodeWorkflowID(c.NodeIDs["node1"])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for {
		d, err := c.Temporal.DescribeWorkflowExecution(ctx, id, "")
		if err == nil && d.WorkflowExecutionInfo.Execution.RunId != skip && d.WorkflowExecutionInfo.CloseTime != nil {
			return closed(t, ctx, d)
		}
		if ctx.Err() != nil {
			t.Fatalf("no converge of node1 (other than %q) closed: %v", skip, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func closed(t *testing.T, ctx context.Context, d *workflowservice.DescribeWorkflowExecutionResponse) (convergeRun, workflows.ConvergeResult) {
	t.Helper()
	info := d.WorkflowExecutionInfo
	var res workflows.ConvergeResult
	if err := c.Temporal.GetWorkflow(ctx, info.Execution.WorkflowId, info.Execution.RunId).Get(ctx, &res); err != nil {
		t.Fatalf("converge %s: %v", info.Execution.RunId, err)
	}
	return convergeRun{runID: info.Execution.RunId, took: info.CloseTime.AsTime().Sub(info.StartTime.AsTime())}, res
}

// printPhases prints where a converge run's time went: each event of its
// workflow history with its offset from the run's start (Temporal's
// clock), then the agent's log lines that time the node's part (the
// set's read, observe, plan, apply), so a run's breakdown needs no
// digging in the node's journal.
func printPhases(t *testing.T, runID, label string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.Temporal.GetWorkflowHistory(ctx, workflows.ConvergeNodeWorkflowID(c.NodeIDs["node1"]), runID, false, 0)
	var start time.Time
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Logf("history of %s: %v", runID, err)
			return
		}
		at := ev.GetEventTime().AsTime()
		if start.IsZero() {
			start = at
		}
		fmt.Printf("PHASE %s history +%7.1f ms %s\n", label, float64(at.Sub(start).Microseconds())/1000, ev.GetEventType())
	}
	out, err := c.Exec("node1", nil, "sh", "-c", `journalctl -u hostcron-node-agent -o short-iso-precise --no-pager | grep -E 'desired set read|observed|planned and applied|applied|converge reconciled|converge fast path|announced|node agent started' | tail -n 12`)
	if err != nil {
		t.Logf("agent journal: %v %s", err, out)
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		fmt.Printf("PHASE %s agent %s\n", label, l)
	}
}

// agentPeakKB is the node agent's VmHWM in KiB.
func agentPeakKB(t *testing.T) int {
	t.Helper()
	out, err := c.Exec("node1", nil, "sh", "-c", `grep VmHWM /proc/$(systemctl show -p MainPID --value hostcron-node-agent)/status`)
	if err != nil {
		t.Fatalf("agent VmHWM: %v %s", err, out)
	}
	f := strings.Fields(out)
	if len(f) < 2 {
		t.Fatalf("agent VmHWM: %q", out)
	}
	kb, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("agent VmHWM %q: %v", out, err)
	}
	return kb
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
