package api

import (
	"strconv"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/quota"
)

func TestQuotasHoldCreatesAndChanges(t *testing.T) {
	v := newEnv(t)
	v.store.SetQuotaDefaults(quota.Limits{MaxJobs: 100, MaxTimeoutSeconds: 3600})
	grandfathered := v.createJob(`,"schedule":"* * * * *","timeout_seconds":3000,"max_memory_mb":1024`)
	id := grandfathered["id"].(string)

	// The admin puts the tenant on a cheap plan.
	got := v.mustJSON("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey,
		`{"min_interval_seconds":300,"max_memory_mb":512,"max_timeout_seconds":null}`, 200)
	limits := got["limits"].(map[string]any)
	if limits["min_interval_seconds"] != 300.0 || limits["max_memory_mb"] != 512.0 || limits["max_timeout_seconds"] != 3600.0 || limits["max_jobs"] != 100.0 {
		t.Fatalf("limits in force: %v", limits)
	}
	if o := v.mustJSON("GET", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, "", 200)["overrides"].(map[string]any); o["max_timeout_seconds"] != nil || o["max_memory_mb"] != 512.0 {
		t.Errorf("overrides: %v", o)
	}

	jobs := v.count(`SELECT count(*) FROM cron_jobs`)
	for _, c := range []struct{ extra, field, limit string }{
		{`,"schedule":"*/2 * * * *"`, "schedule", "min_interval_seconds"},
		{`,"schedule":"0,1 3 * * *"`, "schedule", "min_interval_seconds"},
		{`,"timeout_seconds":3601`, "timeout_seconds", "max_timeout_seconds"},
		{`,"max_memory_mb":513`, "max_memory_mb", "max_memory_mb"},
	} {
		body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"true"` + c.extra + `}`
		// A later field in the JSON wins, so extra overrides the schedule.
		code, out := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body)
		if code != 422 || !strings.Contains(string(out), `"field":"`+c.field+`"`) || !strings.Contains(string(out), c.limit) {
			t.Errorf("create with %s = %d %s, want 422 on %s naming %s", c.extra, code, out, c.field, c.limit)
		}
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != jobs {
		t.Errorf("refused creates stored jobs: %d, want %d", n, jobs)
	}
	v.createJob(`,"schedule":"*/5 * * * *","max_memory_mb":512`) // at the limits: fits

	// The job made under the old limits keeps running, and an edit of its
	// command alone goes through; an edit of its schedule is held to them.
	v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"php artisan queue:work --once"}`, 200)
	code, out := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"schedule":"*/3 * * * *"}`)
	if code != 422 || !strings.Contains(string(out), "min_interval_seconds") {
		t.Errorf("schedule edit over the limit = %d %s, want 422", code, out)
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE id = $1 AND schedule = '* * * * *' AND command = 'php artisan queue:work --once'`, id); n != 1 {
		t.Errorf("the refused edit changed the job")
	}
	v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"schedule":"*/10 * * * *"}`, 200)
}

func TestQuotasOnlyForAdmins(t *testing.T) {
	v := newEnv(t)
	if code, _ := v.do("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", v.key, `{"max_jobs":100000}`); code != 403 {
		t.Errorf("tenant raising its own quota = %d, want 403", code)
	}
	for _, bad := range []string{`{"max_jobs":-1}`, `{"min_interval_seconds":99999999999}`, `{"max_jobs":"many"}`, `{"jobs":5}`} {
		if code, _ := v.do("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, bad); code != 400 {
			t.Errorf("quotas %s = %d, want 400", bad, code)
		}
	}
	if n := v.count(`SELECT count(*) FROM tenant_quotas`); n != 0 {
		t.Errorf("refused quotas stored %d rows", n)
	}
	if code, _ := v.do("GET", "/api/v1/admin/tenants/00000000-0000-0000-0000-000000000000/quotas", adminKey, ""); code != 404 {
		t.Errorf("quotas of an unknown tenant = %d, want 404", code)
	}
}

// A retry of a create that succeeded answers with its job even after the
// tenant's limits were lowered; a new create is held to them.
func TestIdempotentReplayBeatsALoweredQuota(t *testing.T) {
	v := newEnv(t)
	body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"true","timeout_seconds":900}`
	path := "/api/v1/tenants/" + v.tenant + "/cron-jobs"
	code, _, out := v.doHeaders("POST", path, v.key, body, map[string]string{"Idempotency-Key": "create-1"})
	if code != 201 {
		t.Fatalf("create: %d %s", code, out)
	}
	first := string(out)
	v.mustJSON("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, `{"max_timeout_seconds":600}`, 200)
	code, _, out = v.doHeaders("POST", path, v.key, body, map[string]string{"Idempotency-Key": "create-1"})
	if code != 201 || !strings.Contains(first, `"id":"`) || !strings.Contains(string(out), first[strings.Index(first, `"id":"`):strings.Index(first, `"id":"`)+44]) {
		t.Errorf("replay after the limit was lowered: %d %s, want 201 with the first job", code, out)
	}
	if code, _, out := v.doHeaders("POST", path, v.key, body, map[string]string{"Idempotency-Key": "create-2"}); code != 422 {
		t.Errorf("a new create over the lowered limit: %d %s, want 422", code, out)
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
}

// A tenant's run-nows past its run_now_per_minute answer 429 with
// Retry-After and the limit's name, and queue nothing; the admin's
// override applies, and raising it lets the next request through.
func TestRunNowPastTheQuotaAnswers429(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"schedule":"*/5 * * * *"`)["id"].(string)
	v.activate(id)
	v.mustJSON("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, `{"run_now_per_minute":2}`, 200)
	for range 2 {
		v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", 202)
	}
	tasks := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now'`, id)
	code, hdr, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", nil)
	if code != 429 || !strings.Contains(string(out), `"code":"rate_limited"`) || !strings.Contains(string(out), "run_now_per_minute") {
		t.Fatalf("third run-now under a limit of 2 = %d %s, want 429 rate_limited naming run_now_per_minute", code, out)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 || ra > 30 {
		t.Fatalf("Retry-After %q, want 1-30 s (2 a minute)", hdr.Get("Retry-After"))
	}
	// The control panel's admin key acting for the tenant is held to the
	// tenant's quota too.
	if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+"/run-now", adminKey, ""); code != 429 {
		t.Fatalf("admin run-now for the throttled tenant = %d, want 429", code)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now'`, id); n != tasks {
		t.Fatalf("refused run-nows queued %d tasks", n-tasks)
	}
	got := v.mustJSON("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, `{"run_now_per_minute":0}`, 200)
	if got["limits"].(map[string]any)["run_now_per_minute"] != 0.0 {
		t.Fatalf("limits after lifting: %v", got["limits"])
	}
	v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", 202)
	if code, _ := v.do("PUT", "/api/v1/admin/tenants/"+v.tenant+"/quotas", adminKey, `{"run_now_per_minute":-1}`); code != 400 {
		t.Fatalf("a negative run_now_per_minute = %d, want 400", code)
	}
}
