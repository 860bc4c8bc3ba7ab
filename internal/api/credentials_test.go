package api

import (
	"context"
	"strings"
	"testing"
)

// keyWorks reports whether a tenant key is accepted (its job list).
func (v *env) keyWorks(key string) bool {
	v.t.Helper()
	code, _ := v.do("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", key, "")
	return code == 200
}

// nodeWorks reports whether a node credential is accepted (announce
// answers 503 without a workflow engine, 401 to a stranger).
func (v *env) nodeWorks(token string) bool {
	v.t.Helper()
	code, _ := v.do("POST", "/internal/v1/nodes/announce", token, "")
	return code != 401
}

func TestAPIKeysListedWithoutSecrets(t *testing.T) {
	v := newEnv(t)
	created := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","name":"panel sync","read_only":true}`, 201)
	secret := created["key"].(string)
	list := v.mustJSON("GET", "/api/v1/admin/api-keys?tenant_id="+v.tenant, adminKey, "", 200)["api_keys"].([]any)
	if len(list) != 2 {
		t.Fatalf("tenant's keys: %d, want 2 (the env's and the new one): %v", len(list), list)
	}
	found := false
	for _, k := range list {
		m := k.(map[string]any)
		if _, ok := m["key"]; ok {
			t.Errorf("a listed key carries its secret: %v", m)
		}
		if m["id"] == created["id"] {
			found = m["name"] == "panel sync" && m["read_only"] == true && m["tenant_id"] == v.tenant
		}
	}
	if !found {
		t.Errorf("the new key is not listed with its name, flag and tenant: %v", list)
	}
	if got := v.count(`SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8')`, secret); got != 0 {
		t.Errorf("the secret is stored in plain text")
	}
	// A tenant key cannot list keys.
	if code, _ := v.do("GET", "/api/v1/admin/api-keys", v.key, ""); code != 403 {
		t.Errorf("tenant key listing keys = %d, want 403", code)
	}
}

func TestReadOnlyKeyOnlyReads(t *testing.T) {
	v := newEnv(t)
	ro := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","read_only":true}`, 201)["key"].(string)
	job := v.createJob("")
	id := job["id"].(string)
	if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id, ro, ""); code != 200 {
		t.Errorf("read-only key reading its tenant's job = %d, want 200", code)
	}
	body := `{"webroot_id":"` + v.webroot + `","schedule":"*/5 * * * *","command":"true"}`
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/api/v1/tenants/" + v.tenant + "/cron-jobs", body},
		{"POST", "/api/v1/cron-jobs/" + id + "/disable", ""},
		{"POST", "/api/v1/cron-jobs/" + id + "/run-now", ""},
		{"DELETE", "/api/v1/cron-jobs/" + id, ""},
	} {
		code, out := v.do(c.method, c.path, ro, c.body)
		if code != 403 || !strings.Contains(string(out), "read_only") {
			t.Errorf("read-only key: %s %s = %d %s, want 403 read_only", c.method, c.path, code, out)
		}
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE tenant_id = $1`, v.tenant); n != 1 {
		t.Errorf("%d jobs after the read-only key's attempts, want 1", n)
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs WHERE id = $1 AND enabled AND version = $2`, id, int(job["version"].(float64))); n != 1 {
		t.Errorf("the read-only key changed the job")
	}
}

func TestRevokedKeyStopsAtOnce(t *testing.T) {
	v := newEnv(t)
	k := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`"}`, 201)
	if !v.keyWorks(k["key"].(string)) {
		t.Fatal("new key refused")
	}
	r := v.mustJSON("POST", "/api/v1/admin/api-keys/"+k["id"].(string)+"/revoke", adminKey, "", 200)
	if r["revoked_at"] == nil {
		t.Errorf("revoke answer has no revoked_at: %v", r)
	}
	if v.keyWorks(k["key"].(string)) {
		t.Error("revoked key still accepted")
	}
	// Rotating a revoked key would bring its rights back.
	if code, _ := v.do("POST", "/api/v1/admin/api-keys/"+k["id"].(string)+"/rotate", adminKey, `{"grace_seconds":60}`); code != 409 {
		t.Errorf("rotating a revoked key = %d, want 409", code)
	}
	if code, _ := v.do("POST", "/api/v1/admin/api-keys/00000000-0000-0000-0000-000000000000/revoke", adminKey, ""); code != 404 {
		t.Errorf("revoking an unknown key = %d, want 404", code)
	}
}

func TestRotatedKeyKeepsWorkingForItsGrace(t *testing.T) {
	v := newEnv(t)
	old := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","name":"panel","read_only":true}`, 201)
	oldID, oldKey := old["id"].(string), old["key"].(string)

	for _, bad := range []string{`{"grace_seconds":-1}`, `{"grace_seconds":2592001}`, `{"grace":5}`} {
		if code, _ := v.do("POST", "/api/v1/admin/api-keys/"+oldID+"/rotate", adminKey, bad); code != 400 {
			t.Errorf("rotate with %s = %d, want 400", bad, code)
		}
	}
	if n := v.count(`SELECT count(*) FROM api_keys WHERE tenant_id = $1`, v.tenant); n != 2 {
		t.Fatalf("rejected rotations created keys: %d", n)
	}

	nw := v.mustJSON("POST", "/api/v1/admin/api-keys/"+oldID+"/rotate", adminKey, `{"grace_seconds":3600}`, 201)
	if nw["tenant_id"] != v.tenant || nw["read_only"] != true || nw["name"] != "panel" || nw["id"] == oldID {
		t.Errorf("rotated key does not keep the old one's scope: %v", nw)
	}
	if !v.keyWorks(oldKey) || !v.keyWorks(nw["key"].(string)) {
		t.Error("within the grace both keys must work")
	}
	// The grace ends: only the new key works.
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, oldID); err != nil {
		t.Fatal(err)
	}
	if v.keyWorks(oldKey) {
		t.Error("old key accepted after its grace")
	}
	if !v.keyWorks(nw["key"].(string)) {
		t.Error("new key refused")
	}

	// Without a grace the old key stops at once.
	again := v.mustJSON("POST", "/api/v1/admin/api-keys/"+nw["id"].(string)+"/rotate", adminKey, "", 201)
	if v.keyWorks(nw["key"].(string)) {
		t.Error("key rotated without grace still accepted")
	}
	if !v.keyWorks(again["key"].(string)) {
		t.Error("newest key refused")
	}
}

func TestNodeCredentialRotateAndRevoke(t *testing.T) {
	v := newEnv(t)
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	old := v.node
	if !v.nodeWorks(old) {
		t.Fatal("node credential refused")
	}
	r := v.mustJSON("POST", "/api/v1/admin/nodes/"+nodeID+"/credential/rotate", adminKey, `{"grace_seconds":600}`, 200)
	fresh := r["credential"].(string)
	if r["previous_credential_expires_at"] == nil || r["credential_rotated_at"] == nil {
		t.Errorf("rotation answer lacks its times: %v", r)
	}
	if !v.nodeWorks(old) || !v.nodeWorks(fresh) {
		t.Error("within the grace both node credentials must work")
	}
	r = v.mustJSON("POST", "/api/v1/admin/nodes/"+nodeID+"/credential/rotate", adminKey, `{"grace_seconds":0}`, 200)
	newest := r["credential"].(string)
	if v.nodeWorks(old) || v.nodeWorks(fresh) {
		t.Error("credentials replaced without grace still accepted")
	}
	if !v.nodeWorks(newest) {
		t.Error("newest node credential refused")
	}
	v.mustJSON("POST", "/api/v1/admin/nodes/"+nodeID+"/credential/rotate", adminKey, `{"grace_seconds":600}`, 200)
	v.mustJSON("POST", "/api/v1/admin/nodes/"+nodeID+"/credential/revoke", adminKey, "", 200)
	if v.nodeWorks(newest) {
		t.Error("revoked node's previous credential still accepted")
	}
	if code, _ := v.do("POST", "/api/v1/admin/nodes/"+nodeID+"/credential/rotate", v.key, ""); code != 403 {
		t.Errorf("tenant key rotating a node credential = %d, want 403", code)
	}
}
