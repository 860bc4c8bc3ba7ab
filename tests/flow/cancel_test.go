//go:build e2e

package flow

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCancelThroughTheAPI: a tenant starts a long run with run-now and
// cancels it through the API; the cancel travels the outbox and the job's
// workflow to every node, the node running it stops it, and the run is
// recorded as cancelled without counting as a failure (max_failures 1
// would auto-disable on a failure).
func TestCancelThroughTheAPI(t *testing.T) {
	// Running on one node: the node agent reports it, so the API shows it
	// as running (and the job as running since its start).
	id, key, run := longRunNow(t, "flow-cancel-started")
	if !runningSomewhere(t, id) {
		t.Fatal("the API says running, but no node's service runs")
	}
	if j := call(t, "GET", "/api/v1/cron-jobs/"+id, "", 200); j["running_since"] == nil {
		t.Errorf("the running job shows no running_since: %v", j)
	}
	acc := call(t, "POST", run+"/cancel", "", 202)
	if acc["state"] != "cancel_requested" || acc["run_key"] != key {
		t.Fatalf("cancel answered %v", acc)
	}

	r := waitRecorded(t, id, key, 90*time.Second)
	if r["result"] != "cancelled" || !strings.Contains(r["failure_reason"].(string), "cancelled on request") {
		t.Fatalf("run recorded %v (%v), want cancelled", r["result"], r["failure_reason"])
	}
	j := call(t, "GET", "/api/v1/cron-jobs/"+id, "", 200)
	if j["status"] != "active" || j["consecutive_failures"] != 0.0 || j["last_result"] != "cancelled" {
		t.Errorf("after the cancel the job is %v with %v failures, last result %v", j["status"], j["consecutive_failures"], j["last_result"])
	}
	if runningSomewhere(t, id) {
		t.Error("the service still runs on a node after the cancel was recorded")
	}
	call(t, "POST", run+"/cancel", "", 409) // it has ended
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 60*time.Second)
}

// longRunNow creates an active job whose command prints marker and sleeps
// for 5 minutes (max_failures 1: one counted failure auto-disables it),
// runs it now, and waits until the API shows the run as running. It
// returns the job, the run's key and the run's API path.
func longRunNow(t *testing.T, marker string) (id, key, run string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"webroot_id": c.Webroots["acme"].ID, "schedule": "0 6 * * *",
		"command": "echo " + marker + "; sleep 300", "timeout_seconds": 600, "max_failures": 1})
	id = call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", string(body), 201)["id"].(string)
	waitStatus(t, id, "active", 60*time.Second)
	key = call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)["run_key"].(string)
	run = "/api/v1/cron-jobs/" + id + "/runs/" + url.PathEscape(key)
	deadline := time.Now().Add(60 * time.Second)
	for call(t, "GET", run, "", 200)["result"] != "running" {
		if time.Now().After(deadline) {
			t.Fatal("the run-now run never showed as running")
		}
		time.Sleep(200 * time.Millisecond)
	}
	return id, key, run
}

// runningSomewhere reports whether the job's service runs on any node.
func runningSomewhere(t *testing.T, id string) bool {
	t.Helper()
	return runningOn(t, id) != ""
}

// runningOn is the node whose service of the job runs, or "".
func runningOn(t *testing.T, id string) string {
	t.Helper()
	for _, node := range c.Nodes {
		out, _ := c.Exec(node, nil, "systemctl", "is-active", unitName(id)+".service")
		if strings.TrimSpace(out) == "activating" {
			return node
		}
	}
	return ""
}

// waitRecorded polls a run until it has a record (it is neither queued
// nor running) and returns it.
func waitRecorded(t *testing.T, id, key string, timeout time.Duration) map[string]any {
	t.Helper()
	return recordedWithin(t, id, key, timeout, func() {})
}

// recordedWithin is waitRecorded that runs diagnose before it fails.
func recordedWithin(t *testing.T, id, key string, timeout time.Duration, diagnose func()) map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := call(t, "GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key), "", 200)
		if r["result"] != "queued" && r["result"] != "running" {
			return r
		}
		if time.Now().After(deadline) {
			diagnose()
			t.Fatalf("run %s not recorded within %v: %v", key, timeout, r)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// recordedRuns is a job's runs listing without the runs in progress at
// its head: the records.
func recordedRuns(t testing.TB, id string) []any {
	t.Helper()
	var out []any
	for _, r := range call(t, "GET", "/api/v1/cron-jobs/"+id+"/runs", "", 200)["runs"].([]any) {
		if r.(map[string]any)["result"] != "running" {
			out = append(out, r)
		}
	}
	return out
}
