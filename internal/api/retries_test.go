package api

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/hostcron/hostcron/internal/runkey"
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

// The slots view shows a retried slot as its last attempt: the retry's
// record, not the failed scheduled run's.
func TestSlotsShowTheLastAttempt(t *testing.T) {
	v := newEnv(t)
	created := utc("2026-11-20T00:00:00Z")
	id := v.slotsJob("0 * * * *", "UTC", created)
	slot := "2026-11-21T10:00:00Z"
	v.record(id, slot, "exit_code")
	v.sql(`INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
		VALUES ($1, $2, 1, $3, 'success')`, runkey.Retry(id, utc(slot), 2), id, utc(slot))
	code, ans, raw := v.slots(id, "?from="+slot+"&to=2026-11-21T10:01:00Z", v.key)
	if code != 200 || len(ans.Slots) != 1 || ans.Slots[0].Run == nil || ans.Slots[0].Run.RunKey != runkey.Retry(id, utc(slot), 2) ||
		ans.Slots[0].State != "ran" || ans.Slots[0].Run.Result != "success" {
		t.Fatalf("slots %d %s, want the slot with its retry's success", code, raw)
	}
	var attempt struct {
		Attempt int `json:"attempt"`
	}
	_, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(runkey.Retry(id, utc(slot), 2)), v.key, "")
	if json.Unmarshal(out, &attempt) != nil || attempt.Attempt != 2 {
		t.Errorf("the retry's record: %s, want attempt 2", out)
	}
}
