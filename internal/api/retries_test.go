package api

import (
	"encoding/json"
	"testing"
)

// retries (0 to 10) and retry_delay_seconds (1 to 3600) are validated on
// create and update with a 400 naming the field that changes nothing; a
// job shows both, with the defaults 0 and 60.
func TestRetriesValidation(t *testing.T) {
	v := newEnv(t)
	job := v.createJob("")
	id := job["id"].(string)
	if job["retries"] != 0.0 || job["retry_delay_seconds"] != 60.0 {
		t.Fatalf("defaults: retries %v, retry_delay_seconds %v", job["retries"], job["retry_delay_seconds"])
	}
	for _, tt := range []struct{ body, field string }{
		{`{"retries":-1}`, "retries"},
		{`{"retries":11}`, "retries"},
		{`{"retries":1.5}`, "retries"},
		{`{"retries":"3"}`, "retries"},
		{`{"retry_delay_seconds":0}`, "retry_delay_seconds"},
		{`{"retry_delay_seconds":3601}`, "retry_delay_seconds"},
		{`{"retries":3,"retry_delay_seconds":-5}`, "retry_delay_seconds"},
	} {
		code, out := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, tt.body)
		var e struct {
			Error struct{ Field string } `json:"error"`
		}
		_ = json.Unmarshal(out, &e)
		if code != 400 || e.Error.Field != tt.field {
			t.Errorf("PUT %s: %d %s, want 400 naming %s", tt.body, code, out, tt.field)
		}
		code, out = v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key,
			`{"webroot_id":"`+v.webroot+`","schedule":"*/5 * * * *","command":"true",`+tt.body[1:])
		if code != 400 {
			t.Errorf("create with %s: %d %s, want 400", tt.body, code, out)
		}
	}
	if got := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); got["version"] != job["version"] {
		t.Errorf("refused updates changed the job: version %v", got["version"])
	}
	upd := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"retries":10,"retry_delay_seconds":3600}`, 200)
	if upd["retries"] != 10.0 || upd["retry_delay_seconds"] != 3600.0 {
		t.Errorf("update: %v", upd)
	}
	created := v.createJob(`,"retries":3,"retry_delay_seconds":1`)
	if created["retries"] != 3.0 || created["retry_delay_seconds"] != 1.0 {
		t.Errorf("create: %v", created)
	}
}
