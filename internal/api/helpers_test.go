package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

const adminKey = "test-admin-key"

// env is a running API on a fresh database, with one shard, node, tenant,
// webroot and tenant key set up through the admin endpoints.
type env struct {
	t       *testing.T
	srv     *httptest.Server
	store   *store.Store
	router  routers.Router
	shardID string
	node    string // node credential
	tenant  string
	webroot string
	key     string // tenant-scoped key
}

func newEnv(t *testing.T) *env { return newEnvWith(t, Config{}) }

// newEnvWith is newEnv with extra configuration (the admin key is set).
func newEnvWith(t *testing.T, cfg Config) *env {
	t.Helper()
	st := pgtest.New(t)
	cfg.AdminKey = adminKey
	e := New(st, cfg)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("load OpenAPI: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("OpenAPI document invalid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: srv.URL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &env{t: t, srv: srv, store: st, router: router}
	v.shardID = v.mustJSON("POST", "/api/v1/admin/shards", adminKey, `{"name":"web-1","web_storage_dir":"/srv/shared/www"}`, 201)["id"].(string)
	v.node = v.mustJSON("POST", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, `{"name":"node1"}`, 201)["credential"].(string)
	v.tenant, v.webroot, v.key = v.addTenant("acme", v.shardID)
	return v
}

// addTenant registers a tenant with a webroot and a tenant-scoped key.
func (v *env) addTenant(name, shardID string) (tenant, webroot, key string) {
	tenant = v.mustJSON("POST", "/api/v1/admin/tenants", adminKey,
		`{"name":"`+name+`","shard_id":"`+shardID+`","linux_user":"`+name+`"}`, 201)["id"].(string)
	webroot = v.mustJSON("POST", "/api/v1/admin/tenants/"+tenant+"/webroots", adminKey,
		`{"path":"/srv/shared/www/`+name+`/public"}`, 201)["id"].(string)
	key = v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+tenant+`"}`, 201)["key"].(string)
	return tenant, webroot, key
}

// do sends a request with an X-API-Key (or, for /internal, a bearer token)
// and checks the response against the OpenAPI document.
func (v *env) do(method, path, key, body string) (int, []byte) {
	v.t.Helper()
	code, _, out := v.doHeaders(method, path, key, body, nil)
	return code, out
}

// doHeaders is do with extra request headers; it returns the response's.
func (v *env) doHeaders(method, path, key, body string, hdr map[string]string) (int, http.Header, []byte) {
	v.t.Helper()
	var rdr io.Reader
	if body != "" {
		rdr = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, v.srv.URL+path, rdr)
	if err != nil {
		v.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if strings.HasPrefix(path, "/internal/") {
		req.Header.Set("Authorization", "Bearer "+key)
	} else if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for k, val := range hdr {
		req.Header.Set(k, val)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	v.checkSpec(req, body, resp, out)
	return resp.StatusCode, resp.Header, out
}

// checkSpec validates the response (status, body shape) against the
// published document.
func (v *env) checkSpec(req *http.Request, body string, resp *http.Response, out []byte) {
	v.t.Helper()
	specReq := req.Clone(context.Background())
	specReq.Body = io.NopCloser(strings.NewReader(body))
	route, params, err := v.router.FindRoute(specReq)
	if err != nil {
		v.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: specReq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, ExcludeRequestBody: true}}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body:    io.NopCloser(bytes.NewReader(out)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	})
	if err != nil {
		v.t.Errorf("%s %s -> %d does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, out)
	}
}

func (v *env) mustJSON(method, path, key, body string, want int) map[string]any {
	v.t.Helper()
	code, out := v.do(method, path, key, body)
	if code != want {
		v.t.Fatalf("%s %s = %d, want %d: %s", method, path, code, want, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		v.t.Fatalf("%s %s: %v: %s", method, path, err, out)
	}
	return m
}

// createJob creates a job for the env's tenant with extra JSON fields.
func (v *env) createJob(extra string) map[string]any {
	v.t.Helper()
	body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"php artisan schedule:run"` + extra + `}`
	return v.mustJSON("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body, 201)
}

// count returns a number from SQL, for checking what was (not) stored.
func (v *env) count(sql string, args ...any) int {
	v.t.Helper()
	var n int
	if err := v.store.Pool().QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		v.t.Fatal(err)
	}
	return n
}

// activate marks a job provisioned, as the workflow would.
func (v *env) activate(id string) {
	v.t.Helper()
	j, err := v.store.GetJob(context.Background(), id)
	if err != nil {
		v.t.Fatal(err)
	}
	if ok, err := v.store.SetProvisioned(context.Background(), id, j.Version, wire.StatusActive, "", 1); err != nil || !ok {
		v.t.Fatalf("SetProvisioned: %v %v", ok, err)
	}
}

// outcome posts an outcome as the env's node.
func (v *env) outcome(jobID string, slot time.Time, version int, result string) (int, map[string]any) {
	v.t.Helper()
	body := map[string]any{
		"run_key": jobID + "#scheduled#" + slot.UTC().Format(time.RFC3339), "version": version, "scheduled_at": slot.UTC(),
		"started_at": slot.Add(time.Second), "finished_at": slot.Add(3 * time.Second), "result": result,
	}
	if result == "exit_code" {
		body["exit_code"] = 1
	}
	b, _ := json.Marshal(body)
	code, out := v.do("POST", "/internal/v1/cron-jobs/"+jobID+"/outcome", v.node, string(b))
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return code, m
}
