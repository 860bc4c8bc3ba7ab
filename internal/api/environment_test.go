package api

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// envOf is a job answer's environment.
func envOf(t *testing.T, job map[string]any) map[string]any {
	t.Helper()
	env, ok := job["environment"].(map[string]any)
	if !ok {
		t.Fatalf("environment %#v: want an object", job["environment"])
	}
	return env
}

func TestJobEnvironmentLifecycle(t *testing.T) {
	v := newEnv(t)
	plain := v.createJob("")
	if env := envOf(t, plain); len(env) != 0 {
		t.Errorf("job without environment shows %v, want {}", env)
	}
	job := v.createJob(`,"environment":{"GREETING":"hello world","DB_PASSWORD":"s3cr3t"}`)
	id := job["id"].(string)
	want := map[string]any{"GREETING": "hello world", "DB_PASSWORD": "s3cr3t"}
	if env := envOf(t, job); !reflect.DeepEqual(env, want) {
		t.Errorf("create answered %v, want %v", env, want)
	}
	if env := envOf(t, v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)); !reflect.DeepEqual(env, want) {
		t.Errorf("GET answered %v, want %v", env, want)
	}
	list := v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)["cron_jobs"].([]any)
	if env := envOf(t, list[1].(map[string]any)); !reflect.DeepEqual(env, want) {
		t.Errorf("list answered %v, want %v", env, want)
	}
	// The nodes get it in the job's desired state.
	d, _, err := v.store.DesiredJob(context.Background(), id)
	if err != nil || d.Environment["DB_PASSWORD"] != "s3cr3t" || len(d.Environment) != 2 {
		t.Errorf("desired job's environment %v (%v)", d.Environment, err)
	}

	version := job["version"].(float64)
	// Omitted keeps it; the update still bumps the version as every one does.
	up := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"true"}`, 200)
	if env := envOf(t, up); !reflect.DeepEqual(env, want) {
		t.Errorf("update without environment left %v, want %v", env, want)
	}
	// Present replaces the whole map and bumps the version.
	version = up["version"].(float64)
	up = v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"environment":{"ONLY":"1"}}`, 200)
	if env := envOf(t, up); !reflect.DeepEqual(env, map[string]any{"ONLY": "1"}) {
		t.Errorf("update replaced it with %v, want {ONLY:1}", env)
	}
	if up["version"].(float64) != version+1 {
		t.Errorf("version %v after an environment change, want %v", up["version"], version+1)
	}
	// The trail names the field, never the values.
	events := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/events", v.key, "", 200)
	b, _ := json.Marshal(events)
	if !strings.Contains(string(b), `"environment"`) || strings.Contains(string(b), "s3cr3t") {
		t.Errorf("events should name environment and hold no value: %s", b)
	}
	// {} clears it.
	up = v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"environment":{}}`, 200)
	if env := envOf(t, up); len(env) != 0 {
		t.Errorf("update with {} left %v", env)
	}
}

func TestJobEnvironmentRefused(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"environment":{"KEEP":"me"}`)["id"].(string)
	for _, tc := range []struct{ name, env, names string }{
		{"LD_PRELOAD", `{"OK":"1","LD_PRELOAD":"/tmp/x.so"}`, "LD_PRELOAD"},
		{"HOSTCRON_", `{"HOSTCRON_SLOT":"x"}`, "HOSTCRON_SLOT"},
		{"BASH_ENV", `{"BASH_ENV":"/tmp/x"}`, "BASH_ENV"},
		{"bad name", `{"A-B":"x"}`, "A-B"},
		{"NUL", `{"A":"a\u0000b"}`, "A"},
		{"long value", `{"A":"` + strings.Repeat("x", 4097) + `"}`, "A"},
		{"not strings", `{"A":1}`, ""},
		{"null value", `{"A":null}`, "A"},
		{"control character", `{"A":"a\u001bb"}`, "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []struct{ method, path, body string }{
				{"POST", "/api/v1/tenants/" + v.tenant + "/cron-jobs",
					`{"webroot_id":"` + v.webroot + `","schedule":"* * * * *","command":"true","environment":` + tc.env + `}`},
				{"PUT", "/api/v1/cron-jobs/" + id, `{"environment":` + tc.env + `}`},
			} {
				code, out := v.do(r.method, r.path, v.key, r.body)
				var body struct{ Error ProblemDetail }
				_ = json.Unmarshal(out, &body)
				p := body.Error
				if code != 400 || p.Code != "invalid" {
					t.Errorf("%s: %d %s, want 400 invalid", r.method, code, out)
				}
				if tc.names != "" && (p.Field != "environment" || !strings.Contains(p.Message, tc.names)) {
					t.Errorf("%s: %s, want field environment naming %s", r.method, out, tc.names)
				}
			}
		})
	}
	if env := envOf(t, v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)); !reflect.DeepEqual(env, map[string]any{"KEEP": "me"}) {
		t.Errorf("refused updates changed the environment to %v", env)
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != 1 {
		t.Errorf("%d jobs stored, want 1: a refused create stored one", n)
	}
}

// TestJobEnvironmentOtherTenant: another tenant's key gets 404 on the job
// and never sees its values, in any answer.
func TestJobEnvironmentOtherTenant(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"environment":{"DB_PASSWORD":"s3cr3t-sentinel"}`)["id"].(string)
	_, _, otherKey := v.addTenant("globex", v.shardID)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/v1/cron-jobs/" + id, ""},
		{"PUT", "/api/v1/cron-jobs/" + id, `{"command":"id"}`},
		{"PUT", "/api/v1/cron-jobs/" + id, `{"environment":{}}`},
		{"GET", "/api/v1/cron-jobs/" + id + "/events", ""},
		{"GET", "/api/v1/tenants/" + v.tenant + "/cron-jobs", ""},
		{"POST", "/api/v1/cron-jobs/" + id + "/run-now", ""},
	} {
		code, out := v.do(r.method, r.path, otherKey, r.body)
		if code != 404 {
			t.Errorf("%s %s with another tenant's key = %d, want 404", r.method, r.path, code)
		}
		if strings.Contains(string(out), "s3cr3t-sentinel") {
			t.Errorf("%s %s with another tenant's key shows the value: %s", r.method, r.path, out)
		}
	}
	if env := envOf(t, v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)); env["DB_PASSWORD"] != "s3cr3t-sentinel" {
		t.Errorf("owner sees %v after the other tenant's attempts", env)
	}
}
