package api

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Every single-job answer carries the version as ETag; If-Match with
// another version answers 412 and changes nothing.
func TestETagAndIfMatch(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	path := "/api/v1/cron-jobs/" + id
	code, hdr, _ := v.doHeaders("GET", path, v.key, "", nil)
	if code != 200 || hdr.Get("ETag") != `"1"` {
		t.Fatalf("GET: %d ETag %q, want \"1\"", code, hdr.Get("ETag"))
	}
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", path, `{"command":"true"}`},
		{"POST", path + "/disable", ""},
		{"POST", path + "/enable", ""},
		{"DELETE", path, ""},
	} {
		if code, _, out := v.doHeaders(tc.method, tc.path, v.key, tc.body, map[string]string{"If-Match": `"7"`}); code != 412 {
			t.Errorf("%s %s with a stale If-Match = %d, want 412: %s", tc.method, tc.path, code, out)
		} else if p := problem(t, out); p != "precondition_failed" {
			t.Errorf("%s %s: code %q", tc.method, tc.path, p)
		}
	}
	if n := v.count(`SELECT version FROM cron_jobs WHERE id = $1`, id); n != 1 {
		t.Fatalf("stale If-Match changed the job: version %d", n)
	}
	// Bare and quoted versions both match; each answer names the new one.
	code, hdr, _ = v.doHeaders("PUT", path, v.key, `{"command":"true"}`, map[string]string{"If-Match": "1"})
	if code != 200 || hdr.Get("ETag") != `"2"` {
		t.Errorf("PUT If-Match 1: %d ETag %q", code, hdr.Get("ETag"))
	}
	code, hdr, _ = v.doHeaders("POST", path+"/disable", v.key, "", map[string]string{"If-Match": `"2"`})
	if code != 202 || hdr.Get("ETag") != `"3"` {
		t.Errorf("disable If-Match \"2\": %d ETag %q", code, hdr.Get("ETag"))
	}
	if code, _, _ := v.doHeaders("POST", path+"/enable", v.key, "", map[string]string{"If-Match": "three"}); code != 400 {
		t.Errorf("malformed If-Match = %d, want 400", code)
	}
}

// A create retried with the same Idempotency-Key returns the first job;
// the key with another body answers 422; another tenant's key is its own.
func TestCreateIdempotencyKey(t *testing.T) {
	v := newEnv(t)
	create := func(key, tenantKey, tenant, webroot, schedule string) (int, map[string]any) {
		body := `{"webroot_id":"` + webroot + `","schedule":"` + schedule + `","command":"true"}`
		code, hdr, out := v.doHeaders("POST", "/api/v1/tenants/"+tenant+"/cron-jobs", tenantKey, body,
			map[string]string{"Idempotency-Key": key})
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		if code == 201 && hdr.Get("ETag") == "" {
			t.Errorf("create without ETag")
		}
		return code, m
	}
	code, first := create("order-42", v.key, v.tenant, v.webroot, "*/5 * * * *")
	if code != 201 {
		t.Fatalf("first create: %d %v", code, first)
	}
	// The same request spelled differently (defaults written out) is the same.
	body := `{"webroot_id":"` + v.webroot + `", "schedule":"*/5 * * * *", "command":"true", "timezone":"UTC", "enabled":true}`
	code, _, out := v.doHeaders("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body,
		map[string]string{"Idempotency-Key": "order-42"})
	var again map[string]any
	_ = json.Unmarshal(out, &again)
	if code != 201 || again["id"] != first["id"] || again["version"] != first["version"] {
		t.Errorf("retry: %d %v, want the first job %v", code, again, first["id"])
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != 1 {
		t.Errorf("%d jobs after a retried create, want 1", n)
	}
	if code, m := create("order-42", v.key, v.tenant, v.webroot, "0 3 * * *"); code != 422 || m["error"].(map[string]any)["code"] != "idempotency_key_reused" {
		t.Errorf("same key, other body: %d %v, want 422", code, m)
	}
	other, otherWebroot, otherKey := v.addTenant("globex", v.shardID)
	if code, m := create("order-42", otherKey, other, otherWebroot, "*/5 * * * *"); code != 201 || m["id"] == first["id"] {
		t.Errorf("another tenant's key: %d %v", code, m)
	}
	for _, bad := range []string{"tab\there", strings.Repeat("a", 129), "é", ""} {
		if code, _ := create(bad, v.key, v.tenant, v.webroot, "*/5 * * * *"); code != 400 {
			t.Errorf("Idempotency-Key %q = %d, want 400", bad, code)
		}
	}
}

// A command-only PUT racing a disable never re-enables the job: the PUT
// merges its fields into the row as the transaction locked it.
func TestUpdateRacingDisableEndsDisabled(t *testing.T) {
	v := newEnv(t)
	for round := 0; round < 10; round++ {
		id := v.createJob("")["id"].(string)
		v.activate(id)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"echo `+strconv.Itoa(round)+`"}`, 200)
		}()
		go func() {
			defer wg.Done()
			v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/disable", v.key, "", 202)
		}()
		wg.Wait()
		j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)
		if j["enabled"] != false || j["command"] != "echo "+strconv.Itoa(round) || j["version"] != 3.0 {
			t.Fatalf("round %d: %v; want disabled with the new command at version 3", round, j)
		}
	}
}

func problem(t *testing.T, out []byte) string {
	t.Helper()
	var p struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("not a problem: %s", out)
	}
	return p.Error.Code
}

// Concurrent creates with one key make one job; after 24 h the key is
// forgotten.
func TestCreateIdempotencyKeyConcurrentAndExpiry(t *testing.T) {
	v := newEnv(t)
	body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"true"}`
	post := func() (int, string) {
		code, _, out := v.doHeaders("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body,
			map[string]string{"Idempotency-Key": "k-1"})
		var m map[string]any
		_ = json.Unmarshal(out, &m)
		id, _ := m["id"].(string)
		return code, id
	}
	var wg sync.WaitGroup
	ids := make([]string, 6)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			code, id := post()
			if code != 201 {
				t.Errorf("concurrent create %d: %d", i, code)
			}
			ids[i] = id
		}(i)
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent creates with one key returned %v", ids)
		}
	}
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE idempotency_keys SET created_at = now() - interval '25 hours'`); err != nil {
		t.Fatal(err)
	}
	if n, err := v.store.ExpireIdempotencyKeys(context.Background()); n != 1 || err != nil {
		t.Errorf("expired %d keys (%v), want 1", n, err)
	}
	if code, id := post(); code != 201 || id == ids[0] {
		t.Errorf("after 24 h: %d %s, want a new job", code, id)
	}
}
