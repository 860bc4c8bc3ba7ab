package api

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNotificationTargetValidation(t *testing.T) {
	v := newEnv(t)
	path := "/api/v1/tenants/" + v.tenant + "/notification-targets"
	other, _, _ := v.addTenant("globex", v.shardID)
	theirJob := v.mustJSON("POST", "/api/v1/tenants/"+other+"/cron-jobs", adminKey,
		`{"webroot_id":"`+v.webrootOf(other)+`","schedule":"*/5 * * * *","command":"true"}`, 201)["id"].(string)
	cases := []struct {
		name, body, field, says string
	}{
		{"unknown event", `{"kind":"webhook","url":"https://h.example/x","events":["run_failed","exploded"]}`, "events", `exploded`},
		{"no events", `{"kind":"webhook","url":"https://h.example/x","events":[]}`, "events", "at least one"},
		{"unknown kind", `{"kind":"sms","url":"https://h.example/x"}`, "kind", "webhook or email"},
		{"http", `{"kind":"webhook","url":"http://h.example/x"}`, "url", "https"},
		{"loopback", `{"kind":"webhook","url":"https://127.0.0.1/x"}`, "url", "not public"},
		{"metadata", `{"kind":"webhook","url":"https://169.254.169.254/latest"}`, "url", "not public"},
		{"user info", `{"kind":"webhook","url":"https://a:b@h.example/x"}`, "url", "user info"},
		{"short secret", `{"kind":"webhook","url":"https://h.example/x","secret":"short"}`, "secret", "16 to 256"},
		{"bad address", `{"kind":"email","address":"Ops <ops@x.example>"}`, "address", "bare"},
		{"address literal", `{"kind":"email","address":"ops@[10.0.0.5]"}`, "address", "named domain"},
		{"single-label domain", `{"kind":"email","address":"root@localhost"}`, "address", "named domain"},
		{"secret on email", `{"kind":"email","address":"ops@x.example","secret":"0123456789abcdef"}`, "url", "only for kind webhook"},
		{"another tenant's job", `{"kind":"webhook","url":"https://h.example/x","cron_job_id":"` + theirJob + `"}`, "cron_job_id", "no such cron job"},
		{"not a job id", `{"kind":"webhook","url":"https://h.example/x","cron_job_id":"x"}`, "cron_job_id", "not a cron job id"},
	}
	for _, c := range cases {
		code, out := v.do("POST", path, v.key, c.body)
		if code != 400 || !strings.Contains(string(out), `"field":"`+c.field+`"`) || !strings.Contains(string(out), c.says) {
			t.Errorf("%s: %d %s, want 400 on %s saying %s", c.name, code, out, c.field, c.says)
		}
	}
	if n := v.count(`SELECT count(*) FROM notification_targets`); n != 0 {
		t.Errorf("%d targets stored by invalid requests", n)
	}
}

func TestNotificationTargetsAndDeliveries(t *testing.T) {
	v := newEnvWith(t, Config{MailRelay: true})
	path := "/api/v1/tenants/" + v.tenant + "/notification-targets"
	job := v.createJob(`,"max_failures":3`)["id"].(string)
	v.activate(job)
	created := v.mustJSON("POST", path, v.key, `{"kind":"webhook","url":"https://hooks.example.com/cron"}`, 201)
	id, secret := created["id"].(string), created["secret"].(string)
	if len(secret) != 64 || created["has_secret"] != true || len(created["events"].([]any)) != 5 {
		t.Errorf("created %v", created)
	}
	mail := v.mustJSON("POST", path, v.key, `{"kind":"email","address":"ops@acme.example","events":["auto_disabled","auto_disabled"],"cron_job_id":"`+job+`"}`, 201)
	if ev := mail["events"].([]any); len(ev) != 1 || mail["secret"] != nil || mail["cron_job_id"] != job {
		t.Errorf("e-mail target %v", mail)
	}
	list := v.mustJSON("GET", path, v.key, "", 200)["targets"].([]any)
	if len(list) != 2 || strings.Contains(v.rawGet(path, v.key), secret) {
		t.Errorf("list %v (the secret must never be listed)", list)
	}
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 3; i++ {
		if code, m := v.outcome(job, base.Add(time.Duration(i)*time.Minute), 1, "exit_code"); code != 200 {
			t.Fatalf("outcome: %d %v", code, m)
		}
	}
	ds := v.mustJSON("GET", "/api/v1/notification-targets/"+id+"/deliveries?limit=2", v.key, "", 200)
	page := ds["deliveries"].([]any)
	if len(page) != 2 || ds["next_before"] == nil {
		t.Fatalf("deliveries page %v", ds)
	}
	first := page[0].(map[string]any)
	if first["state"] != "pending" || first["cron_job_id"] != job || first["attempts"].(float64) != 0 {
		t.Errorf("newest delivery %v", first)
	}
	rest := v.mustJSON("GET", "/api/v1/notification-targets/"+id+"/deliveries?before="+jsonNum(ds["next_before"]), v.key, "", 200)
	if n := len(rest["deliveries"].([]any)); n != 3 { // 5 events: run_failed x3, disable_warning, auto_disabled
		t.Errorf("second page: %d deliveries, want 3", n)
	}
	if code, _ := v.do("DELETE", "/api/v1/notification-targets/"+id, v.key, ""); code != 204 {
		t.Errorf("delete: %d", code)
	}
	if code, _ := v.do("GET", "/api/v1/notification-targets/"+id+"/deliveries", v.key, ""); code != 404 {
		t.Errorf("deliveries of a deleted target: %d", code)
	}
}

func TestNotificationTargetsTenantIsolation(t *testing.T) {
	v := newEnv(t)
	target := v.mustJSON("POST", "/api/v1/tenants/"+v.tenant+"/notification-targets", v.key,
		`{"kind":"webhook","url":"https://hooks.example.com/cron"}`, 201)["id"].(string)
	other, _, otherKey := v.addTenant("globex", v.shardID)
	ro := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","read_only":true}`, 201)["key"].(string)
	for _, c := range []struct {
		method, path, key string
		want              int
	}{
		{"GET", "/api/v1/tenants/" + v.tenant + "/notification-targets", otherKey, 404},
		{"POST", "/api/v1/tenants/" + v.tenant + "/notification-targets", otherKey, 404},
		{"GET", "/api/v1/notification-targets/" + target + "/deliveries", otherKey, 404},
		{"DELETE", "/api/v1/notification-targets/" + target, otherKey, 404},
		{"POST", "/api/v1/tenants/" + v.tenant + "/notification-targets", ro, 403},
		{"DELETE", "/api/v1/notification-targets/" + target, ro, 403},
		{"GET", "/api/v1/notification-targets/" + target + "/deliveries", ro, 200},
		{"GET", "/api/v1/tenants/" + other + "/notification-targets", otherKey, 200},
		{"GET", "/api/v1/notification-targets/not-an-id/deliveries", v.key, 404},
	} {
		body := ""
		if c.method == "POST" {
			body = `{"kind":"webhook","url":"https://evil.example/"}`
		}
		if code, out := v.do(c.method, c.path, c.key, body); code != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, out, c.want)
		}
	}
	if n := v.count(`SELECT count(*) FROM notification_targets`); n != 1 {
		t.Errorf("%d targets, want the one", n)
	}
}

func TestNotificationPrivateTargetsWhenAllowed(t *testing.T) {
	v := newEnvWith(t, Config{AllowPrivateTargets: true})
	v.mustJSON("POST", "/api/v1/tenants/"+v.tenant+"/notification-targets", v.key,
		`{"kind":"webhook","url":"http://127.0.0.1:9999/hook","secret":"0123456789abcdef"}`, 201)
}

func (v *env) rawGet(path, key string) string {
	v.t.Helper()
	_, out := v.do("GET", path, key, "")
	return string(out)
}

// webrootOf is a tenant's first webroot.
func (v *env) webrootOf(tenant string) string {
	v.t.Helper()
	var id string
	if err := v.store.Pool().QueryRow(context.Background(), `SELECT id::text FROM webroots WHERE tenant_id = $1`, tenant).Scan(&id); err != nil {
		v.t.Fatal(err)
	}
	return id
}

func jsonNum(x any) string { return strconv.FormatFloat(x.(float64), 'f', -1, 64) }

// TestEmailTargetsNeedARelay: without an SMTP relay the platform sends no
// e-mail, so an e-mail target is refused (its deliveries could only pile
// up), and nothing is stored; webhooks are unaffected.
func TestEmailTargetsNeedARelay(t *testing.T) {
	v := newEnv(t)
	path := "/api/v1/tenants/" + v.tenant + "/notification-targets"
	code, out := v.do("POST", path, v.key, `{"kind":"email","address":"ops@acme.example"}`)
	if code != 422 || !strings.Contains(string(out), `"code":"mail_not_configured"`) {
		t.Errorf("e-mail target without a relay: %d %s, want 422 mail_not_configured", code, out)
	}
	if n := v.count(`SELECT count(*) FROM notification_targets`); n != 0 {
		t.Errorf("%d targets stored", n)
	}
	v.mustJSON("POST", path, v.key, `{"kind":"webhook","url":"https://hooks.example.com/cron"}`, 201)
}

func TestCheckKinds(t *testing.T) {
	cases := []struct {
		name     string
		in       []string
		operator bool
		want     []string
		says     string // in the error; "" for none
	}{
		{"none given: every kind", nil, false, []string{"run_failed", "recovered", "disable_warning", "auto_disabled", "lost"}, ""},
		{"none given, operator: every operator kind", nil, true, []string{"platform_error", "node_not_converged", "slots_unrun"}, ""},
		{"an empty list", []string{}, false, nil, "at least one event kind"},
		{"repeats dropped, order kept", []string{"lost", "run_failed", "lost"}, false, []string{"lost", "run_failed"}, ""},
		{"unknown, naming the known", []string{"exploded"}, false, nil, `unknown event kind "exploded" (known: run_failed, recovered, disable_warning, auto_disabled, lost)`},
		{"an operator kind on a tenant's target", []string{"platform_error"}, false, nil, `unknown event kind "platform_error"`},
		{"a tenant kind on an operator's target", []string{"run_failed"}, true, nil, `unknown operator event kind "run_failed" (known: platform_error, node_not_converged, slots_unrun)`},
	}
	for _, c := range cases {
		check := checkEvents
		if c.operator {
			check = checkOperatorEvents
		}
		got, err := check(c.in)
		switch {
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v, %v; want an error saying %s", c.name, got, err, c.says)
		case c.says == "" && (err != nil || !slices.Equal(got, c.want)):
			t.Errorf("%s: %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}
