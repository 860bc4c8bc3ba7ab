//go:build e2e

package flow

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// logLines asks the tenant logs API for a job's lines containing marker.
func logLines(t *testing.T, apiKey, tenantID, jobID, marker string) (int, []any) {
	t.Helper()
	q := url.Values{"log_type": {"cron"}, "since": {"10m"}, "limit": {"100"}, "contains": {marker}}
	if jobID != "" {
		q.Set("cron_job_id", jobID)
	}
	req, _ := http.NewRequest("GET", c.APIURL+"/api/v1/tenants/"+tenantID+"/logs?"+q.Encode(), nil)
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Lines []any `json:"lines"`
	}
	_ = jsonDecode(resp, &body)
	return resp.StatusCode, body.Lines
}

// TestTenantLogsFromLoki: a job's output reaches Loki through the node
// agent's shipper and the tenant logs API within seconds; a restarted
// agent neither loses nor repeats lines; another tenant sees nothing.
func TestTenantLogsFromLoki(t *testing.T) {
	id := createJob(t, "0 7 * * *")
	waitStatus(t, id, "active", 60*time.Second)
	acme := c.Tenants["acme"].ID
	wait := func(marker string) time.Duration {
		start := time.Now()
		for {
			code, lines := logLines(t, key, acme, id, marker)
			if code == 200 && len(lines) > 0 {
				return time.Since(start)
			}
			if time.Since(start) > 60*time.Second {
				t.Fatalf("line %q not in the tenant logs after 60s (last answer %d)", marker, code)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	marker1 := fmt.Sprintf("logmarker-%d", time.Now().UnixNano())
	call(t, "PUT", "/api/v1/cron-jobs/"+id, `{"command":"echo `+marker1+`"}`, 200)
	waitStatus(t, id, "active", 60*time.Second)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)
	lat := wait(marker1)
	t.Logf("line visible in the tenant logs API %v after the run was requested", lat.Round(time.Millisecond))

	// Restart every agent, then log a second line.
	for _, n := range c.Nodes {
		if out, err := c.Exec(n, nil, "systemctl", "restart", "hostcron-node-agent.service"); err != nil {
			t.Fatalf("restart agent on %s: %v %s", n, err, out)
		}
	}
	marker2 := fmt.Sprintf("logmarker-%d", time.Now().UnixNano())
	call(t, "PUT", "/api/v1/cron-jobs/"+id, `{"command":"echo `+marker2+`"}`, 200)
	waitStatus(t, id, "active", 60*time.Second)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)
	wait(marker2)
	time.Sleep(3 * time.Second) // a duplicate push would have landed by now
	for _, m := range []string{marker1, marker2} {
		if _, lines := logLines(t, key, acme, id, m); len(lines) != 1 {
			t.Errorf("%s: %d lines, want exactly 1: %v", m, len(lines), lines)
		}
	}

	// globex: 404 on acme's logs, and its own logs do not have acme's line.
	_, globexKey, err := c.Store.CreateAPIKey(context.Background(), c.Tenants["globex"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := logLines(t, globexKey, acme, "", marker1); code != 404 {
		t.Errorf("another tenant's key on acme's logs: %d, want 404", code)
	}
	for _, attempt := range []string{marker1, `"} or {tenant_id="acme`, `.*`} {
		code, lines := logLines(t, globexKey, c.Tenants["globex"].ID, "", attempt)
		if code != 200 || len(lines) != 0 {
			t.Errorf("globex asking %q: %d, %d lines; want 200 and none", attempt, code, len(lines))
		}
		for _, l := range lines {
			if strings.Contains(fmt.Sprint(l), "logmarker") {
				t.Errorf("globex sees acme's line %v", l)
			}
		}
	}
}

// TestRunLogsSelectOneRun: two runs of one job print the same marker; the
// logs API's run= returns exactly the lines of the run asked for (its
// systemd invocation, shipped as structured metadata), and the run record
// says what the command used.
func TestRunLogsSelectOneRun(t *testing.T) {
	marker := fmt.Sprintf("runmarker-%d", time.Now().UnixNano())
	body := fmt.Sprintf(`{"webroot_id":%q,"schedule":"0 7 * * *","command":"echo %s $HOSTCRON_RUN_KEY"}`, c.Webroots["acme"].ID, marker)
	id := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", body, 201)["id"].(string)
	waitStatus(t, id, "active", 60*time.Second)
	var keys []string
	for i := 0; i < 2; i++ {
		k := call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)["run_key"].(string)
		keys = append(keys, k)
		waitRecorded(t, id, k, 60*time.Second)
	}
	for _, k := range keys {
		r := call(t, "GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(k), "", 200)
		if inv, _ := r["invocation_id"].(string); len(inv) != 32 || r["cpu_seconds"] == nil || r["peak_memory_bytes"] == nil {
			t.Errorf("run %s: invocation %v, cpu %v, peak %v: want all reported", k, r["invocation_id"], r["cpu_seconds"], r["peak_memory_bytes"])
		}
	}
	// Both runs' lines are in Loki (by marker), then run= picks one.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, lines := logLines(t, key, c.Tenants["acme"].ID, id, marker); len(lines) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the two runs' lines never reached the logs API")
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, k := range keys {
		req, _ := http.NewRequest("GET", c.APIURL+"/api/v1/tenants/"+c.Tenants["acme"].ID+"/logs?run="+url.QueryEscape(k), nil)
		req.Header.Set("X-API-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Lines []struct {
				Line string `json:"line"`
			} `json:"lines"`
		}
		_ = jsonDecode(resp, &out)
		resp.Body.Close()
		// The run's lines: its command's, and cron-outcome's report of it
		// (the hook ends the same activation); none of the other run's.
		mine := 0
		for _, l := range out.Lines {
			if strings.Contains(l.Line, marker+" "+k) {
				mine++
			}
			for _, other := range keys {
				if other != k && strings.Contains(l.Line, other) {
					t.Errorf("run=%s returned the other run's line %q", k, l.Line)
				}
			}
		}
		if resp.StatusCode != 200 || mine != 1 {
			t.Errorf("run=%s: %d %+v, want that run's line once", k, resp.StatusCode, out.Lines)
		}
	}
}
