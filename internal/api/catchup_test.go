package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCatchUpWindow: the window defaults to 0, is set on create and
// update, and a bad value is a 400 naming the field that changes nothing.
func TestCatchUpWindow(t *testing.T) {
	v := newEnv(t)
	if w := v.createJob("")["catchup_window_seconds"]; w != float64(0) {
		t.Errorf("default window %v, want 0", w)
	}
	job := v.createJob(`,"catchup_window_seconds":3600`)
	id := job["id"].(string)
	if job["catchup_window_seconds"] != float64(3600) {
		t.Errorf("created with window %v, want 3600", job["catchup_window_seconds"])
	}
	up := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"catchup_window_seconds":86400}`, 200)
	if up["catchup_window_seconds"] != float64(86400) {
		t.Errorf("updated window %v, want 86400", up["catchup_window_seconds"])
	}
	for _, bad := range []string{`-1`, `86401`, `"3600"`, `1.5`, `null`} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/api/v1/tenants/" + v.tenant + "/cron-jobs",
				`{"webroot_id":"` + v.webroot + `","schedule":"* * * * *","command":"true","catchup_window_seconds":` + bad + `}`},
			{"PUT", "/api/v1/cron-jobs/" + id, `{"catchup_window_seconds":` + bad + `}`},
		} {
			code, out := v.do(r.method, r.path, v.key, r.body)
			if bad == `null` {
				// null is "absent": keeps the value (every field's rule).
				if code/100 != 2 {
					t.Errorf("%s with null: %d %s", r.method, code, out)
				}
				continue
			}
			var body struct{ Error ProblemDetail }
			_ = json.Unmarshal(out, &body)
			if code != 400 {
				t.Errorf("%s with %s: %d %s, want 400", r.method, bad, code, out)
			}
			if strings.HasPrefix(bad, "-") || bad == "86401" {
				if body.Error.Field != "catchup_window_seconds" || !strings.Contains(body.Error.Message, "86400") {
					t.Errorf("%s with %s: %s, want the field and its bounds", r.method, bad, out)
				}
			}
		}
	}
	got := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)
	if got["catchup_window_seconds"] != float64(86400) {
		t.Errorf("refused updates changed the window to %v", got["catchup_window_seconds"])
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE catchup_window_seconds NOT IN (0, 86400)`); n != 0 {
		t.Errorf("%d jobs stored with a refused window", n)
	}
}

// TestOutcomeTrigger: a node may say catchup for a scheduled key only;
// the run then lists with trigger catchup.
func TestOutcomeTrigger(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"catchup_window_seconds":3600`)["id"].(string)
	v.activate(id)
	slot := time.Now().UTC().Truncate(5 * time.Minute).Add(-10 * time.Minute)
	post := func(key, trigger string, at time.Time) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"run_key": key, "version": 1, "scheduled_at": at,
			"started_at": at.Add(time.Minute), "finished_at": at.Add(2 * time.Minute), "result": "success", "trigger": trigger})
		return v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, string(body))
	}
	if code, out := post(id+"#manual#req-1", "catchup", slot); code != 400 || !strings.Contains(string(out), "trigger") {
		t.Errorf("catchup on a manual key: %d %s, want 400 naming trigger", code, out)
	}
	if code, out := post(id+"#scheduled#"+slot.Format(time.RFC3339), "manual", slot); code != 400 {
		t.Errorf("manual on a scheduled key: %d %s, want 400", code, out)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_runs`); n != 0 {
		t.Fatalf("%d runs stored by refused outcomes", n)
	}
	if code, out := post(id+"#scheduled#"+slot.Format(time.RFC3339), "catchup", slot); code != 200 {
		t.Fatalf("catch-up outcome: %d %s", code, out)
	}
	runs := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?trigger=catchup", v.key, "", 200)["runs"].([]any)
	if len(runs) != 1 || runs[0].(map[string]any)["trigger"] != "catchup" ||
		runs[0].(map[string]any)["run_key"] != id+"#scheduled#"+slot.Format(time.RFC3339) {
		t.Errorf("runs with trigger catchup: %v", runs)
	}
}
