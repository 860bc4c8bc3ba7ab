package api

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"
)

// A deleted job's history answers its own tenant for the run retention:
// runs, one run, the audit trail; the job itself is 410 Gone with
// deleted_at, and so is every change or view that needs the job. Another
// tenant gets exactly the 404 of an unknown id everywhere.
func TestDeletedJobHistory(t *testing.T) {
	v := newEnv(t)
	_, _, otherKey := v.addTenant("globex", v.shardID)
	id := v.createJob(`,"name":"nightly","schedule":"* * * * *","timeout_seconds":60`)["id"].(string)
	v.activate(id)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	v.outcome(id, slot, 1, "success")
	v.outcome(id, slot.Add(time.Minute), 1, "exit_code")
	queued := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", 202)["run_key"].(string)

	v.mustJSON("DELETE", "/api/v1/cron-jobs/"+id, v.key, "", 202)
	// Deleting: visible as today, in the listing too.
	if j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); j["status"] != "deleting" {
		t.Fatalf("job while deleting: %v", j)
	}
	if n := len(v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)["cron_jobs"].([]any)); n != 1 {
		t.Errorf("listing while deleting: %d jobs, want 1", n)
	}
	if err := v.store.FinishDelete(context.Background(), id); err != nil {
		t.Fatal(err)
	}

	unknown := "00000000-0000-4000-8000-000000000000"
	runKey := url.PathEscape(id + "#scheduled#" + slot.Format(time.RFC3339))
	var runID float64
	for _, c := range []struct {
		path     string
		method   string
		tenant   int // the owner's answer
		readable bool
	}{
		{"", "GET", 410, false},
		{"", "PUT", 410, false},
		{"", "DELETE", 410, false},
		{"/enable", "POST", 410, false},
		{"/disable", "POST", 410, false},
		{"/run-now", "POST", 410, false},
		{"/slots", "GET", 410, false},
		{"/preview", "GET", 410, false},
		{"/runs/" + runKey + "/cancel", "POST", 410, false},
		{"/runs", "GET", 200, true},
		{"/runs/" + runKey, "GET", 200, true},
		{"/events", "GET", 200, true},
	} {
		body := ""
		if c.method == "PUT" {
			body = `{"command":"true"}`
		}
		code, out := v.do(c.method, "/api/v1/cron-jobs/"+id+c.path, v.key, body)
		if code != c.tenant {
			t.Errorf("owner %s %s: %d, want %d: %s", c.method, c.path, code, c.tenant, out)
		}
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		if code == 410 {
			e, _ := m["error"].(map[string]any)
			if at, _ := time.Parse(time.RFC3339, str(e["deleted_at"])); e["code"] != "gone" || time.Since(at) > time.Minute {
				t.Errorf("owner %s %s: %s; want code gone with deleted_at", c.method, c.path, out)
			}
		}
		if c.path == "/runs/"+runKey {
			runID, _ = m["id"].(float64)
		}
		// Another tenant cannot tell the deleted job from an id that never
		// existed.
		code, out = v.do(c.method, "/api/v1/cron-jobs/"+id+c.path, otherKey, body)
		ucode, uout := v.do(c.method, "/api/v1/cron-jobs/"+unknown+c.path, otherKey, body)
		if code != 404 || string(out) != string(uout) || ucode != 404 {
			t.Errorf("other tenant %s %s: %d %s; unknown id: %d %s; want the same 404", c.method, c.path, code, out, ucode, uout)
		}
	}

	runs := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)["runs"].([]any)
	if len(runs) != 2 || runs[0].(map[string]any)["result"] != "exit_code" || runs[1].(map[string]any)["result"] != "success" {
		t.Errorf("runs of the deleted job: %v; want its two records", runs)
	}
	if r := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+jsonID(runID), v.key, "", 200); r["result"] != "success" {
		t.Errorf("run by id of the deleted job: %v", r)
	}
	// The run-now no node reported will never run: not queued, unknown.
	if code, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(queued), v.key, ""); code != 404 {
		t.Errorf("unreported run-now of the deleted job: %d %s, want 404", code, out)
	}
	events := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/events", v.key, "", 200)["events"].([]any)
	if a := events[0].(map[string]any)["action"]; a != "deleted" {
		t.Errorf("newest event of the deleted job: %v, want deleted", a)
	}
	if n := len(v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)["cron_jobs"].([]any)); n != 0 {
		t.Errorf("listing after the delete: %d jobs, want none", n)
	}
	// An admin key sees what the owner sees.
	if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id, adminKey, ""); code != 410 {
		t.Errorf("admin GET of the deleted job: %d, want 410", code)
	}
	v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", adminKey, "", 200)

	// A node that was partitioned through the delete reports a run: it is
	// recorded (200, status deleted, so the node drops it), once.
	late := slot.Add(2 * time.Minute)
	if code, m := v.outcome(id, late, 1, "success"); code != 200 || m["status"] != "deleted" || m["duplicate"] != false {
		t.Errorf("late outcome: %d %v; want 200, deleted, recorded", code, m)
	}
	if code, m := v.outcome(id, late, 1, "success"); code != 200 || m["duplicate"] != true {
		t.Errorf("late outcome again: %d %v; want a duplicate", code, m)
	}
	if runs := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)["runs"].([]any); len(runs) != 3 {
		t.Errorf("runs after the late outcome: %d, want 3", len(runs))
	}
	// An unknown job stays 404 for a node (dead-lettered, as before).
	if code, _ := v.outcome(unknown, late, 1, "success"); code != 404 {
		t.Errorf("outcome of an unknown job: %d, want 404", code)
	}
}

func str(v any) string { s, _ := v.(string); return s }

func jsonID(f float64) string { b, _ := json.Marshal(int64(f)); return string(b) }
