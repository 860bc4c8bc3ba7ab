//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestCancelStopsTheRunningRun: on a booted node, a cancel naming another
// run leaves the running one alone (the control); a cancel naming it stops
// the whole process group through systemd and cron-outcome records the
// run as cancelled, which does not count as a failure, and spends the
// marker.
func TestCancelStopsTheRunningRun(t *testing.T) {
	const node = "node1"
	job := c.NewJob(t, "acme", "0 3 29 2 *", `echo cancel-me-started; sleep 300; echo cancel-me-survived`, 600, 64, 1)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })

	c.Agent(t, node, nil, nil, "run-now", job.UnitName(), "1")
	key := fmt.Sprintf("%s#manual#1", job.ID)
	journal(t, node, job, func(s string) bool { return strings.Contains(s, "cancel-me-started") })

	var res map[string]bool
	c.Agent(t, node, nil, &res, "cancel", job.UnitName(), job.ID+"#manual#2")
	if res["stopped"] {
		t.Fatal("a cancel naming another run stopped the running one")
	}
	if state, _ := c.Exec(node, nil, "systemctl", "is-active", job.UnitName()+".service"); strings.TrimSpace(state) != "activating" {
		t.Fatalf("the run no longer runs after a cancel of another run: %q", state)
	}

	c.Agent(t, node, nil, &res, "cancel", job.UnitName(), key)
	if !res["stopped"] {
		t.Fatal("the cancel did not stop the running run")
	}
	var run store.Run
	c.WaitRuns(t, job.ID, 60*time.Second, func(runs []store.Run) bool {
		for _, r := range runs {
			if r.RunKey == key {
				run = r
				return true
			}
		}
		return false
	})
	if run.Result != wire.ResultCancelled || !strings.Contains(run.FailureReason, "cancelled on request") {
		t.Fatalf("run recorded %s (%s), want cancelled", run.Result, run.FailureReason)
	}
	if run.FinishedAt == nil || run.FinishedAt.Sub(*run.StartedAt) > 60*time.Second {
		t.Errorf("run ended at %v after starting at %v: not stopped promptly", run.FinishedAt, run.StartedAt)
	}
	if j, err := c.Store.GetJob(t.Context(), job.ID); err != nil || j.ConsecutiveFailures != 0 || j.Status == wire.StatusAutoDisabled {
		t.Errorf("after a cancel (max_failures 1) the job has %d failures, status %s (%v): a cancel is no failure", j.ConsecutiveFailures, j.Status, err)
	}
	if out, err := c.Exec(node, nil, "pgrep", "-u", job.User, "-f", "sleep 300"); err == nil {
		t.Errorf("the command's process outlived the cancel: %s", out)
	}
	if out := journal(t, node, job, nil); strings.Contains(out, "cancel-me-survived") {
		t.Errorf("the command ran on after the cancel:\n%s", out)
	}
	if out, err := c.Exec(node, nil, "ls", "/run/hostcron/cancel/"+job.UnitName()+".json"); err == nil {
		t.Errorf("the cancel marker was not spent: %s", out)
	}
}

// TestCancelKillsACommandThatIgnoresTerm: a command (and its child) that
// ignore SIGTERM are killed with SIGKILL after the runner's grace, and the
// run is still recorded as cancelled, not as the tenant's failure.
func TestCancelKillsACommandThatIgnoresTerm(t *testing.T) {
	const node = "node1"
	job := c.NewJob(t, "acme", "0 3 29 2 *", `trap '' TERM; echo stubborn-started; sleep 300`, 600, 64, 1)
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })
	c.Agent(t, node, nil, nil, "run-now", job.UnitName(), "1")
	key := fmt.Sprintf("%s#manual#1", job.ID)
	journal(t, node, job, func(s string) bool { return strings.Contains(s, "stubborn-started") })
	var res map[string]bool
	c.Agent(t, node, nil, &res, "cancel", job.UnitName(), key)
	if !res["stopped"] {
		t.Fatal("the cancel did not signal the running run")
	}
	var run store.Run
	c.WaitRuns(t, job.ID, 90*time.Second, func(runs []store.Run) bool {
		for _, r := range runs {
			if r.RunKey == key {
				run = r
				return true
			}
		}
		return false
	})
	if run.Result != wire.ResultCancelled || run.Signal == nil || *run.Signal != "SIGKILL" {
		t.Fatalf("run recorded %s (signal %v, %s), want cancelled by SIGKILL after the grace", run.Result, run.Signal, run.FailureReason)
	}
	if out, err := c.Exec(node, nil, "pgrep", "-u", job.User, "-f", "sleep 300"); err == nil {
		t.Errorf("the command's child outlived the kill: %s", out)
	}
}
