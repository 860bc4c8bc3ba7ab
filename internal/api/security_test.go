package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestOutcomeIsInputNotTruth: the outcome endpoint ignores fields it does
// not know (a node upgraded first) but refuses out-of-range values with a
// 400 — never a 500 — and stores nothing from them.
func TestOutcomeIsInputNotTruth(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	v.activate(id)
	slot := time.Now().UTC().Truncate(5 * time.Minute).Add(-5 * time.Minute)
	body := func(extra string, slot time.Time) string {
		s := slot.Format(time.RFC3339)
		return fmt.Sprintf(`{"run_key":"%s#scheduled#%s","version":1,"scheduled_at":"%s","result":"exit_code"%s}`, id, s, s, extra)
	}
	path := "/internal/v1/cron-jobs/" + id + "/outcome"
	bad := map[string]string{
		"exit code 256":      body(`,"exit_code":256`, slot),
		"exit code -1":       body(`,"exit_code":-1`, slot),
		"unknown signal":     body(`,"signal":"SIGPWN"`, slot),
		"NUL in signal":      body(`,"signal":"SIGKILL\u0000"`, slot),
		"NUL in reason":      body(`,"failure_reason":"a\u0000b"`, slot),
		"slot in the future": body(``, slot.Add(time.Hour)),
		"slot too old":       body(``, slot.Add(-200*24*time.Hour)),
		"version ahead":      strings.Replace(body(``, slot), `"version":1`, `"version":7`, 1),
		"not an object":      `["x"]`,
	}
	for name, b := range bad {
		code, out := v.do("POST", path, v.node, b)
		if code != 400 {
			t.Errorf("%s: %d %s, want 400", name, code, out)
		}
	}
	if n := v.count(`SELECT count(*) FROM cron_job_runs`); n != 0 {
		t.Fatalf("%d runs stored from bad outcomes", n)
	}
	code, out := v.do("POST", path, v.node, body(`,"exit_code":3,"signal":"SIGTERM","some_future_field":{"x":1}`, slot))
	if code != 200 {
		t.Errorf("outcome with an unknown field: %d %s, want 200", code, out)
	}
}

// TestErrorBodiesNameNoGoTypes: a body of the wrong JSON kind is a 400
// that says what JSON it wants, not which Go type failed to decode.
func TestErrorBodiesNameNoGoTypes(t *testing.T) {
	v := newEnv(t)
	for _, b := range []string{`[]`, `"x"`, `5`, `{"schedule":5}`, `{"webroot_id":{}}`} {
		code, out := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, b)
		if code != 400 || strings.Contains(string(out), "api.") || strings.Contains(string(out), "Request") ||
			strings.Contains(string(out), "struct") || strings.Contains(string(out), "Go value") {
			t.Errorf("body %s: %d %s", b, code, out)
		}
	}
	huge := `{"command":"` + strings.Repeat("x", 100<<10) + `"}`
	if code, _ := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, huge); code != 400 {
		t.Errorf("100 KiB body: %d, want 400", code)
	}
}

// TestMetricsCountTheStatusSent: a handler's error is counted with the
// status Echo's error handler sent for it (404, 400, 401 from a group's
// middleware, 500; they were counted as 200), labels come only from route
// templates and known methods, and the tenant API's port serves no
// /metrics (core serves them on a listener of its own).
func TestMetricsCountTheStatusSent(t *testing.T) {
	reg := prometheus.NewRegistry()
	v := newEnvWith(t, Config{Registry: reg})
	raw := func(method, path, key string) int {
		req, _ := http.NewRequest(method, v.srv.URL+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	job := "/api/v1/cron-jobs/00000000-0000-4000-8000-000000000000"
	if code := raw("GET", job, adminKey); code != 404 {
		t.Fatalf("missing job: %d", code)
	}
	if code := raw("GET", job, ""); code != 401 {
		t.Fatalf("no key: %d", code)
	}
	if code := raw("GET", "/api/v1/cron-preview?schedule=bad", adminKey); code != 400 {
		t.Fatalf("bad schedule: %d", code)
	}
	if code := raw("GET", "/metrics", ""); code != 404 {
		t.Errorf("GET /metrics on the API port: %d, want 404", code)
	}
	raw("GET", "/no/such/path/"+strings.Repeat("x", 40), adminKey)
	raw("BREW", "/api/v1/cron-preview", adminKey)
	v.store.Pool().Close() // every store call now fails: a 500
	if code := raw("GET", job, adminKey); code != 500 {
		t.Fatalf("with the database gone: %d, want 500", code)
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := rec.Body.String()
	for _, want := range []string{
		`code="404",method="GET",route="/api/v1/cron-jobs/:id"`,
		`code="401",method="GET",route="/api/v1/cron-jobs/:id"`,
		`code="400",method="GET",route="/api/v1/cron-preview"`,
		`code="500",method="GET",route="/api/v1/cron-jobs/:id"`,
		`route="other"`, `method="other"`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, never := range []string{`code="200",method="GET",route="/api/v1/cron-jobs/:id"`, "/no/such/path", "BREW"} {
		if strings.Contains(m, never) {
			t.Errorf("metrics hold %s", never)
		}
	}
}

// TestAdminInputsSafeByConstruction: a tenant cannot be given root, a
// privileged group or another tenant's user; a webroot outside the
// tenant's own storage directory is refused.
func TestAdminInputsSafeByConstruction(t *testing.T) {
	v := newEnv(t)
	tenant := func(name, user, group string) string {
		b := `{"name":"` + name + `","shard_id":"` + v.shardID + `","linux_user":"` + user + `"`
		if group != "" {
			b += `,"linux_group":"` + group + `"`
		}
		return b + `}`
	}
	for _, tc := range []struct {
		body string
		code int
	}{
		{tenant("evil", "root", ""), 400},
		{tenant("evil", "evil", "sudo"), 400},
		{tenant("evil", "evil", "docker"), 400},
		{tenant("evil", "systemd-journal", ""), 400},
		{tenant("evil", "acme", ""), 409},     // acme's user
		{tenant("evil", "evil", "acme"), 409}, // acme's group
		{tenant("fine", "fine", ""), 201},
	} {
		if code, out := v.do("POST", "/api/v1/admin/tenants", adminKey, tc.body); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.body, code, out, tc.code)
		}
	}
	for _, p := range []string{"/srv/shared/www/globex/public", "/srv/shared/www/acme", "/srv/shared/www/acmeX/public",
		"/srv/shared/www", "/etc/acme/public", "/srv/shared/wwwacme/public"} {
		if code, out := v.do("POST", "/api/v1/admin/tenants/"+v.tenant+"/webroots", adminKey, `{"path":"`+p+`"}`); code != 400 {
			t.Errorf("webroot %s: %d %s, want 400", p, code, out)
		}
	}
	if code, _ := v.do("POST", "/api/v1/admin/tenants/"+v.tenant+"/webroots", adminKey, `{"path":"/srv/shared/www/acme/other"}`); code != 201 {
		t.Errorf("webroot under the tenant's dir: %d, want 201", code)
	}
}

func TestValidateAdminKey(t *testing.T) {
	if ValidateAdminKey("short-key") == nil {
		t.Error("accepted a 9-character admin key")
	}
	if ValidateAdminKey(strings.Repeat("k", MinAdminKeyLen)) != nil || ValidateAdminKey("") != nil {
		t.Error("refused a long key or no key")
	}
}

// A tenant cannot create jobs without bound: every job is a unit pair on
// every node of its shard, a row in each converge and in the unpaginated
// job list.
func TestJobsPerTenantBounded(t *testing.T) {
	v := newEnv(t)
	v.store.SetQuotaDefaults(quota.Limits{MaxJobs: 3})
	for i := 0; i < 3; i++ {
		v.createJob("")
	}
	body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"true"}`
	if code, out := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body); code != 422 || !strings.Contains(string(out), "max_jobs") {
		t.Fatalf("job past the limit: %d %s, want 422 naming max_jobs", code, out)
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != 3 {
		t.Errorf("%d jobs stored, want 3", n)
	}
	// Another tenant has its own allowance, and concurrent creates do not
	// overshoot it.
	other, otherWebroot, otherKey := v.addTenant("globex", v.shardID)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.do("POST", "/api/v1/tenants/"+other+"/cron-jobs", otherKey,
				`{"webroot_id":"`+otherWebroot+`","schedule":"* * * * *","command":"true"}`)
		}()
	}
	wg.Wait()
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE tenant_id = $1`, other); n != 3 {
		t.Errorf("%d jobs after concurrent creates, want 3", n)
	}
}
