//go:build e2e

// Package flow tests the whole control path on real parts: the API on
// PostgreSQL, the outbox dispatcher, Temporal workflows on the embedded
// server, and node agents as Temporal workers inside three booted systemd
// nodes. Run with `make test-e2e`.
package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/core"
	"github.com/hostcron/hostcron/tests/harness"
	"github.com/hostcron/hostcron/workflows"
)

var (
	c   *harness.Cluster
	key string // acme's tenant key
	// mail is the relay the core sends notification e-mail through.
	mail     *mailbox
	mailAddr string
)

func TestMain(m *testing.M) {
	var err error
	var stopMail func()
	mail, mailAddr, stopMail, err = startMailbox()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow setup:", err)
		os.Exit(1)
	}
	c, err = harness.Start(harness.Options{Nodes: 3, Temporal: true, Loki: true, NodeTimeout: 15 * time.Second, DenyControlPlane: true,
		Mail: core.SMTPConfig{Addr: mailAddr, From: "Hostcron <cron@platform.test>"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "flow setup:", err)
		os.Exit(1)
	}
	_, key, err = c.Store.CreateAPIKey(context.Background(), c.Tenants["acme"].ID)
	code := 1
	if err == nil {
		harness.TearDownBeforeTimeout("flow")
		code = m.Run()
	} else {
		fmt.Fprintln(os.Stderr, "flow setup:", err)
	}
	c.Stop()
	stopMail()
	os.Exit(code)
}

func call(t testing.TB, method, path, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, c.APIURL+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s = %d, want %d: %s", method, path, resp.StatusCode, want, out)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

func createJob(t testing.TB, schedule string) string {
	body, _ := json.Marshal(map[string]any{"webroot_id": c.Webroots["acme"].ID, "schedule": schedule, "command": "echo flow"})
	return call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", string(body), 201)["id"].(string)
}

// waitStatus polls a job until its status is want; it returns how long
// that took.
func waitStatus(t testing.TB, id, want string, timeout time.Duration) (time.Duration, map[string]any) {
	t.Helper()
	start := time.Now()
	for {
		j := call(t, "GET", "/api/v1/cron-jobs/"+id, "", 200)
		if j["status"] == want {
			return time.Since(start), j
		}
		if time.Since(start) > timeout {
			t.Fatalf("job %s: status %v (%v) after %v, want %s", id, j["status"], j["status_message"], timeout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func unitName(id string) string { return "cron-acme-" + id }

var created []string // active jobs, for the converge tests

// TestCreateActivatesOnAllNodes creates 50 jobs through the API and
// measures how long each takes to be active, timers running on all nodes.
func TestCreateActivatesOnAllNodes(t *testing.T) {
	const n = 50
	var lat []time.Duration
	var phases [][]time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		id := createJob(t, "0 3 * * *")
		waitStatus(t, id, "active", 60*time.Second)
		seen := time.Now()
		lat = append(lat, seen.Sub(start))
		created = append(created, id)
		phases = append(phases, phasesOf(t, id, start, seen))
	}
	for _, node := range c.Nodes {
		st := c.State(t, node)
		for _, id := range created {
			if s := st[unitName(id)]; !s.TimerActive || !s.TimerEnabled {
				t.Errorf("%s: %s not active: %+v", node, unitName(id), s)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 := lat[n/2], lat[n*99/100]
	t.Logf("create -> active on %d nodes, %d jobs: p50 %v, p99 %v", len(c.Nodes), n, p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	fmt.Printf("BENCH create_to_active nodes=%d n=%d p50_ms=%d p99_ms=%d\n", len(c.Nodes), n, p50.Milliseconds(), p99.Milliseconds())
	printPhases(t, phases)
}

func TestDisableStopsTimersEverywhere(t *testing.T) {
	id := createJob(t, "0 4 * * *")
	waitStatus(t, id, "active", 60*time.Second)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/disable", "", 202)
	_, j := waitStatus(t, id, "disabled", 60*time.Second)
	if j["next_run_at"] != nil {
		t.Errorf("disabled job has next_run_at %v", j["next_run_at"])
	}
	for _, node := range c.Nodes {
		if s := c.State(t, node)[unitName(id)]; s.TimerActive || s.TimerEnabled || s.Name == "" {
			t.Errorf("%s: disabled job's timer %+v", node, s)
		}
	}
	// Enable and disable racing: the nodes end with the last state.
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/enable", "", 202)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/disable", "", 202)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/enable", "", 202)
	waitStatus(t, id, "active", 60*time.Second)
	for _, node := range c.Nodes {
		if s := c.State(t, node)[unitName(id)]; !s.TimerActive {
			t.Errorf("%s: after enable/disable/enable the timer is not active: %+v", node, s)
		}
	}
	created = append(created, id)
}

// TestNodeDownDuringCreate: a node that is down fails the provisioning
// (naming it) without blocking the others, and gets the job when it
// returns: its announce re-queues the shard's failed jobs, so the job
// becomes active without a retry.
func TestNodeDownDuringCreate(t *testing.T) {
	if err := c.StopNode("node3"); err != nil {
		t.Fatal(err)
	}
	id := createJob(t, "0 5 * * *")
	_, j := waitStatus(t, id, "failed", 90*time.Second)
	if msg, _ := j["status_message"].(string); !strings.Contains(msg, "node3") || strings.Contains(msg, "node1") {
		t.Errorf("status message %q should name node3 only", msg)
	}
	for _, node := range []string{"node1", "node2"} {
		if s := c.State(t, node)[unitName(id)]; !s.TimerActive {
			t.Errorf("%s did not get the job while node3 was down: %+v", node, s)
		}
	}
	if err := c.StartNode("node3"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !c.State(t, "node3")[unitName(id)].TimerActive {
		if time.Now().After(deadline) {
			t.Fatal("node3 did not get the job after it returned")
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitStatus(t, id, "active", 90*time.Second)
	created = append(created, id)
}

// TestNewNodeConverges: a node booted into the shard announces itself and
// gets every job with one daemon-reload.
func TestNewNodeConverges(t *testing.T) {
	if err := c.AddNodes("node4"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var res workflows.ConvergeResult
	for {
		run := c.Temporal.GetWorkflow(ctx, workflows.ConvergeNodeWorkflowID(c.NodeIDs["node4"]), "")
		if err := run.Get(ctx, &res); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("no converge of node4: %v", err)
		}
		time.Sleep(time.Second)
	}
	// No daemon-reload: systemd on the new node has never loaded these
	// units, it loads them when they start (unitmgr reloadStep).
	if res.Reloads != 0 || len(res.Written) != 2*len(created) || len(res.Enabled) != len(created) {
		t.Errorf("converge of node4: %d jobs, %d written, %d enabled, %d reloads; want %d jobs, no reload",
			res.Jobs, len(res.Written), len(res.Enabled), res.Reloads, len(created))
	}
	st := c.State(t, "node4")
	for _, id := range created {
		if !st[unitName(id)].TimerActive {
			t.Errorf("node4 lacks %s", unitName(id))
		}
	}
}

func TestRunNowAndDelete(t *testing.T) {
	id := createJob(t, "0 6 * * *")
	waitStatus(t, id, "active", 60*time.Second)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)
	deadline := time.Now().Add(60 * time.Second)
	for {
		runs := recordedRuns(t, id)
		if len(runs) == 1 {
			if r := runs[0].(map[string]any); r["result"] != "success" {
				t.Errorf("run-now run: %v", r)
			}
			break
		}
		if len(runs) > 1 || time.Now().After(deadline) {
			t.Fatalf("run-now: %d runs", len(runs))
		}
		time.Sleep(500 * time.Millisecond)
	}
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 60*time.Second)
	for _, node := range c.Nodes {
		if _, ok := c.State(t, node)[unitName(id)]; ok {
			t.Errorf("%s still has the deleted job's units", node)
		}
	}
	// The run history outlives the job.
	if runs := recordedRuns(t, id); len(runs) != 1 || runs[0].(map[string]any)["result"] != "success" {
		t.Errorf("runs of the deleted job: %v; want its run-now's success", runs)
	}
}

// waitGone polls until the API answers the job is gone (410: its delete
// workflow removed the row and left its tombstone).
func waitGone(t testing.TB, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequest("GET", c.APIURL+"/api/v1/cron-jobs/"+id, nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 410 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted job still there")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDeleteWhileNodeDown: a node that was down while a job was deleted
// still has its units when it returns; its converge removes them as an
// orphan (the snapshot saw the write they came from), leaves a tombstone,
// and keeps every live job.
func TestDeleteWhileNodeDown(t *testing.T) {
	id := createJob(t, "0 7 * * *")
	waitStatus(t, id, "active", 60*time.Second)
	if err := c.StopNode("node3"); err != nil {
		t.Fatal(err)
	}
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 90*time.Second)
	if err := c.StartNode("node3"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, ok := c.State(t, "node3")[unitName(id)]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node3 kept the deleted job's units after it converged")
		}
		time.Sleep(500 * time.Millisecond)
	}
	tomb, err := os.ReadFile(c.Root("node3") + "/var/lib/hostcron/jobs/.tombstones.json")
	if err != nil || !strings.Contains(string(tomb), unitName(id)) {
		t.Errorf("node3's tombstones lack the orphan %s: %v\n%s", unitName(id), err, tomb)
	}
	st := c.State(t, "node3")
	for _, live := range created {
		if !st[unitName(live)].TimerActive {
			t.Errorf("node3 lost the live job %s in the converge", unitName(live))
		}
	}
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
