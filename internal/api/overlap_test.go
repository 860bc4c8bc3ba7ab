package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOverlapPolicy: the policy defaults to skip, is set on create and
// update and returned by GET; a bad value is a 400 naming the field that
// changes nothing.
func TestOverlapPolicy(t *testing.T) {
	v := newEnv(t)
	if p := v.createJob("")["overlap_policy"]; p != "skip" {
		t.Errorf("default policy %v, want skip", p)
	}
	job := v.createJob(`,"overlap_policy":"buffer_one"`)
	id := job["id"].(string)
	if job["overlap_policy"] != "buffer_one" {
		t.Errorf("created with policy %v, want buffer_one", job["overlap_policy"])
	}
	up := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"overlap_policy":"cancel_previous"}`, 200)
	if up["overlap_policy"] != "cancel_previous" {
		t.Errorf("updated policy %v, want cancel_previous", up["overlap_policy"])
	}
	// Another field's update keeps the policy.
	if up := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"timeout_seconds":60}`, 200); up["overlap_policy"] != "cancel_previous" {
		t.Errorf("an update without the field changed the policy to %v", up["overlap_policy"])
	}
	for _, bad := range []string{`"queue"`, `""`, `"SKIP"`, `1`, `true`, `null`} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/api/v1/tenants/" + v.tenant + "/cron-jobs",
				`{"webroot_id":"` + v.webroot + `","schedule":"* * * * *","command":"true","overlap_policy":` + bad + `}`},
			{"PUT", "/api/v1/cron-jobs/" + id, `{"overlap_policy":` + bad + `}`},
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
				continue
			}
			if strings.HasPrefix(bad, `"`) && (body.Error.Field != "overlap_policy" || !strings.Contains(body.Error.Message, "buffer_one")) {
				t.Errorf("%s with %s: %s, want the field and its values", r.method, bad, out)
			}
		}
	}
	got := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)
	if got["overlap_policy"] != "cancel_previous" {
		t.Errorf("refused updates changed the policy to %v", got["overlap_policy"])
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE overlap_policy NOT IN ('skip', 'buffer_one', 'cancel_previous')`); n != 0 {
		t.Errorf("%d jobs stored with a refused policy", n)
	}
	// The column refuses what the API would, should a writer skip it.
	if _, err := v.store.Pool().Exec(t.Context(), `UPDATE cron_jobs SET overlap_policy = 'queue' WHERE id = $1`, id); err == nil {
		t.Error("the column took an unknown policy")
	}
}
