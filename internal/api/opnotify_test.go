package api

import (
	"strings"
	"testing"
	"time"
)

const opPath = "/api/v1/admin/notification-targets"

// Operator targets: admin-only, validated as tenant targets are, and
// kept apart both ways: a tenant key never sees or reaches one (404 on
// the tenant routes, 403 on the admin ones), the admin routes do not
// reach a tenant's target, a platform_error reaches the operator and
// never a tenant's target, and a tenant's failure never the operator.
func TestOperatorTargets(t *testing.T) {
	v := newEnvWith(t, Config{MailRelay: true})
	hook := v.mustJSON("POST", opPath, adminKey, `{"kind":"webhook","url":"https://ops.example.com/hook"}`, 201)
	op := hook["id"].(string)
	if len(hook["secret"].(string)) != 64 || len(hook["events"].([]any)) != 3 || hook["tenant_id"] != nil || hook["shard_id"] != nil {
		t.Errorf("created %v", hook)
	}
	mail := v.mustJSON("POST", opPath, adminKey,
		`{"kind":"email","address":"oncall@platform.example","shard_id":"`+v.shardID+`","events":["node_not_converged"]}`, 201)
	if mail["shard_id"] != v.shardID {
		t.Errorf("e-mail target %v", mail)
	}
	tenantTarget := v.mustJSON("POST", "/api/v1/tenants/"+v.tenant+"/notification-targets", v.key,
		`{"kind":"webhook","url":"https://hooks.example.com/cron"}`, 201)["id"].(string)
	list := v.mustJSON("GET", opPath, adminKey, "", 200)["targets"].([]any)
	if len(list) != 2 || strings.Contains(v.rawGet(opPath, adminKey), hook["secret"].(string)) {
		t.Errorf("operator list %v (only the operator's, never a secret)", list)
	}
	if tl := v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/notification-targets", adminKey, "", 200)["targets"].([]any); len(tl) != 1 {
		t.Errorf("the tenant's list shows %d targets, want its one", len(tl))
	}

	job := v.createJob(`,"max_failures":3`)["id"].(string)
	v.activate(job)
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i, r := range []string{"platform_error", "platform_error", "exit_code"} {
		if code, m := v.outcome(job, base.Add(time.Duration(i)*time.Minute), 1, r); code != 200 {
			t.Fatalf("outcome: %d %v", code, m)
		}
	}
	ds := v.mustJSON("GET", opPath+"/"+op+"/deliveries", adminKey, "", 200)["deliveries"].([]any)
	if len(ds) != 1 {
		t.Fatalf("operator deliveries %v, want one platform_error for both", ds)
	}
	if d := ds[0].(map[string]any); d["kind"] != "platform_error" || d["shard_id"] != v.shardID || !strings.HasPrefix(d["run_key"].(string), "platform_error@") {
		t.Errorf("operator delivery %v", d)
	}
	td := v.mustJSON("GET", "/api/v1/notification-targets/"+tenantTarget+"/deliveries", v.key, "", 200)["deliveries"].([]any)
	if len(td) != 1 || td[0].(map[string]any)["kind"] != "run_failed" {
		t.Errorf("tenant deliveries %v, want only its run_failed", td)
	}

	for _, c := range []struct {
		method, path, key string
		want              int
	}{
		{"GET", opPath, v.key, 403},
		{"POST", opPath, v.key, 403},
		{"DELETE", opPath + "/" + op, v.key, 403},
		{"GET", opPath + "/" + op + "/deliveries", v.key, 403},
		{"GET", "/api/v1/notification-targets/" + op + "/deliveries", v.key, 404},
		{"DELETE", "/api/v1/notification-targets/" + op, v.key, 404},
		{"GET", "/api/v1/notification-targets/" + op + "/deliveries", adminKey, 404}, // the admin's are under /admin
		{"DELETE", opPath + "/" + tenantTarget, adminKey, 404},
		{"GET", opPath + "/" + tenantTarget + "/deliveries", adminKey, 404},
		{"DELETE", opPath + "/not-an-id", adminKey, 404},
	} {
		body := ""
		if c.method == "POST" {
			body = `{"kind":"webhook","url":"https://evil.example/"}`
		}
		if code, out := v.do(c.method, c.path, c.key, body); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, out, c.want)
		}
	}
	if n := v.count(`SELECT count(*) FROM notification_targets`); n != 3 {
		t.Errorf("%d targets, want 3", n)
	}
	if code, _ := v.do("DELETE", opPath+"/"+op, adminKey, ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := v.do("GET", opPath+"/"+op+"/deliveries", adminKey, ""); code != 404 {
		t.Errorf("deliveries of a deleted target: %d", code)
	}
}

func TestOperatorTargetValidation(t *testing.T) {
	v := newEnv(t)
	for _, c := range []struct {
		name, body string
		code       int
		field, say string
	}{
		{"a tenant kind", `{"kind":"webhook","url":"https://h.example/x","events":["run_failed"]}`, 400, "events", "unknown operator event kind"},
		{"no events", `{"kind":"webhook","url":"https://h.example/x","events":[]}`, 400, "events", "at least one"},
		{"loopback", `{"kind":"webhook","url":"https://127.0.0.1/x"}`, 400, "url", "not public"},
		{"http", `{"kind":"webhook","url":"http://h.example/x"}`, 400, "url", "https"},
		{"single-label domain", `{"kind":"email","address":"root@localhost"}`, 400, "address", "named domain"},
		{"not a shard id", `{"kind":"webhook","url":"https://h.example/x","shard_id":"x"}`, 400, "shard_id", "not a shard id"},
		{"no such shard", `{"kind":"webhook","url":"https://h.example/x","shard_id":"7b0e5c3a-55a4-4bb7-9c53-2f8c1b1d0a11"}`, 400, "shard_id", "no such shard"},
		{"a job", `{"kind":"webhook","url":"https://h.example/x","cron_job_id":"7b0e5c3a-55a4-4bb7-9c53-2f8c1b1d0a11"}`, 400, "", "cron_job_id"},
		{"e-mail without a relay", `{"kind":"email","address":"ops@platform.example"}`, 422, "kind", "mail_not_configured"},
	} {
		code, out := v.do("POST", opPath, adminKey, c.body)
		if code != c.code || !strings.Contains(string(out), `"field":"`+c.field+`"`) && c.field != "" || !strings.Contains(string(out), c.say) {
			t.Errorf("%s: %d %s, want %d on %q saying %q", c.name, code, out, c.code, c.field, c.say)
		}
	}
	if n := v.count(`SELECT count(*) FROM notification_targets`); n != 0 {
		t.Errorf("%d targets stored by invalid requests", n)
	}
}
