package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJobLifecycle(t *testing.T) {
	v := newEnv(t)
	job := v.createJob(`,"timezone":"Europe/Berlin","max_failures":3`)
	id := job["id"].(string)
	if job["status"] != "pending" || job["version"] != 1.0 || job["next_run_at"] == nil || job["timezone"] != "Europe/Berlin" {
		t.Fatalf("created job: %v", job)
	}
	if job["timeout_seconds"] != 300.0 || job["max_memory_mb"] != 256.0 || job["max_failures"] != 3.0 || job["enabled"] != true {
		t.Errorf("defaults not applied: %v", job)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'create'`, id); n != 1 {
		t.Errorf("create queued %d tasks", n)
	}
	list := v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)
	if jobs := list["cron_jobs"].([]any); len(jobs) != 1 || jobs[0].(map[string]any)["id"] != id {
		t.Errorf("list: %v", list)
	}
	got := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)
	if got["command"] != "php artisan schedule:run" {
		t.Errorf("get: %v", got)
	}
	// PUT keeps absent fields and bumps the version.
	upd := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"schedule":"0 3 * * *"}`, 200)
	if upd["schedule"] != "0 3 * * *" || upd["timezone"] != "Europe/Berlin" || upd["version"] != 2.0 {
		t.Errorf("update: %v", upd)
	}
	next, _ := time.Parse(time.RFC3339, upd["next_run_at"].(string))
	if loc, _ := time.LoadLocation("Europe/Berlin"); next.In(loc).Hour() != 3 || next.Before(time.Now()) {
		t.Errorf("next_run_at %v is not the next 03:00 in Berlin", next)
	}
	// run-now needs a provisioned job.
	if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, ""); code != 409 {
		t.Errorf("run-now on pending job = %d, want 409", code)
	}
	v.activate(id)
	v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", 202)
	dis := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/disable", v.key, "", 202)
	if dis["enabled"] != false || dis["next_run_at"] != nil || dis["version"] != 3.0 {
		t.Errorf("disable: %v", dis)
	}
	if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+"/retry", v.key, ""); code != 202 {
		t.Errorf("retry of a pending job = %d, want 202", code)
	}
	v.activate(id)
	if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+"/retry", v.key, ""); code != 409 {
		t.Errorf("retry of an active job = %d, want 409", code)
	}
	en := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/enable", v.key, "", 202)
	if en["enabled"] != true || en["next_run_at"] == nil {
		t.Errorf("enable: %v", en)
	}
	runs := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)
	if len(runs["runs"].([]any)) != 0 {
		t.Errorf("runs: %v", runs)
	}
	del := v.mustJSON("DELETE", "/api/v1/cron-jobs/"+id, v.key, "", 202)
	if del["status"] != "deleting" || del["next_run_at"] != nil {
		t.Errorf("delete: %v", del)
	}
	v.mustJSON("DELETE", "/api/v1/cron-jobs/"+id, v.key, "", 202) // idempotent
	for _, path := range []string{"/enable", "/disable", "/run-now"} {
		if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+path, v.key, ""); code != 409 {
			t.Errorf("%s on a deleting job = %d, want 409", path, code)
		}
	}
	if code, _ := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"true"}`); code != 409 {
		t.Errorf("update of a deleting job = %d, want 409", code)
	}
	wantActions := "create,update,run_now,disable,retry,enable,delete"
	var actions []string
	rows, _ := v.store.Pool().Query(context.Background(), `SELECT action FROM cron_job_tasks WHERE cron_job_id = $1 ORDER BY id`, id)
	for rows.Next() {
		var a string
		_ = rows.Scan(&a)
		actions = append(actions, a)
	}
	if strings.Join(actions, ",") != wantActions {
		t.Errorf("queued tasks %v, want %s", actions, wantActions)
	}
}

func TestPreview(t *testing.T) {
	v := newEnv(t)
	p := v.mustJSON("GET", "/api/v1/cron-preview?schedule=30+4+1,15+*+5&timezone=Europe/Berlin&count=3", v.key, "", 200)
	if oc := p["on_calendar"].([]any); len(oc) != 2 || oc[0] != "Fri *-*-* 04:30:00 Europe/Berlin" {
		t.Errorf("preview on_calendar: %v", p)
	}
	if n := p["next_runs"].([]any); len(n) != 3 {
		t.Errorf("preview next_runs: %v", p)
	}
	for q, field := range map[string]string{
		"schedule=0+0+31+2+*": "schedule", "schedule=*+*+*+*+*&timezone=EST": "timezone",
		"schedule=@reboot": "schedule", "schedule=*+*+*+*+*&count=0": "count", "": "schedule",
	} {
		code, out := v.do("GET", "/api/v1/cron-preview?"+q, v.key, "")
		var pr Problem
		_ = json.Unmarshal(out, &pr)
		if code != 400 || pr.Error.Field != field {
			t.Errorf("preview %q = %d %s, want 400 on %s", q, code, out, field)
		}
	}
}

func TestAuthAndTenantIsolation(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	otherTenant, otherWebroot, otherKey := v.addTenant("globex", v.shardID)
	otherJob := v.mustJSON("POST", "/api/v1/tenants/"+otherTenant+"/cron-jobs", otherKey,
		`{"webroot_id":"`+otherWebroot+`","schedule":"* * * * *","command":"true"}`, 201)["id"].(string)

	for _, key := range []string{"", "nope"} {
		if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id, key, ""); code != 401 {
			t.Errorf("key %q: %d, want 401", key, code)
		}
	}
	// A tenant key sees nothing of another tenant: every route answers 404.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/v1/cron-jobs/" + otherJob, ""},
		{"PUT", "/api/v1/cron-jobs/" + otherJob, `{"command":"id"}`},
		{"DELETE", "/api/v1/cron-jobs/" + otherJob, ""},
		{"POST", "/api/v1/cron-jobs/" + otherJob + "/enable", ""},
		{"POST", "/api/v1/cron-jobs/" + otherJob + "/disable", ""},
		{"POST", "/api/v1/cron-jobs/" + otherJob + "/retry", ""},
		{"POST", "/api/v1/cron-jobs/" + otherJob + "/run-now", ""},
		{"GET", "/api/v1/cron-jobs/" + otherJob + "/runs", ""},
		{"GET", "/api/v1/cron-jobs/" + otherJob + "/preview", ""},
		{"GET", "/api/v1/cron-jobs/" + otherJob + "/runs/1", ""},
		{"GET", "/api/v1/cron-jobs/" + otherJob + "/runs/" + otherJob + "%23manual%231", ""},
		{"POST", "/api/v1/cron-jobs/" + otherJob + "/disable", `{"reason":"mine now"}`},
		{"GET", "/api/v1/tenants/" + otherTenant + "/cron-jobs?status=pending", ""},
		{"GET", "/api/v1/tenants/" + otherTenant + "/cron-jobs", ""},
		{"POST", "/api/v1/tenants/" + otherTenant + "/cron-jobs", `{"webroot_id":"` + otherWebroot + `","schedule":"* * * * *","command":"id"}`},
		{"GET", "/api/v1/cron-jobs/00000000-0000-0000-0000-000000000000", ""},
		{"GET", "/api/v1/cron-jobs/not-a-uuid", ""},
	} {
		code, out := v.do(r.method, r.path, v.key, r.body)
		if code != 404 {
			t.Errorf("%s %s with another tenant's key = %d %s, want 404", r.method, r.path, code, out)
		}
	}
	// Its own webroot only: another tenant's webroot is "no such webroot".
	code, _ := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key,
		`{"webroot_id":"`+otherWebroot+`","schedule":"* * * * *","command":"true"}`)
	if code != 400 {
		t.Errorf("create with another tenant's webroot = %d, want 400", code)
	}
	if code, _ := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"webroot_id":"`+otherWebroot+`"}`); code != 400 {
		t.Errorf("move to another tenant's webroot = %d, want 400", code)
	}
	if code, _ := v.do("POST", "/api/v1/admin/shards", v.key, `{"name":"x","web_storage_dir":"/x"}`); code != 403 {
		t.Errorf("admin route with a tenant key = %d, want 403", code)
	}
	// The other job is untouched.
	j, _ := v.store.GetJob(context.Background(), otherJob)
	if j.Command != "true" || j.Status != "pending" || j.Version != 1 {
		t.Errorf("other tenant's job changed: %+v", j)
	}
	// Admin sees both, and the shard's nodes.
	v.mustJSON("GET", "/api/v1/cron-jobs/"+otherJob, adminKey, "", 200)
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	if len(nodes) != 1 || nodes[0].(map[string]any)["name"] != "node1" {
		t.Errorf("nodes: %v", nodes)
	}
	if code, _ := v.do("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", v.key, ""); code != 403 {
		t.Errorf("node list with a tenant key = %d, want 403", code)
	}
	// A node announcing itself without a workflow engine: 503, and it was
	// recorded as seen.
	if code, _ := v.do("POST", "/internal/v1/nodes/announce", v.node, ""); code != 503 {
		t.Errorf("announce without converger = %d, want 503", code)
	}
	if n := v.count(`SELECT count(*) FROM nodes WHERE last_seen_at IS NOT NULL`); n != 1 {
		t.Errorf("announce did not mark the node seen")
	}
	if code, _ := v.do("POST", "/internal/v1/nodes/announce", "bogus", ""); code != 401 {
		t.Errorf("announce with a bad credential = %d, want 401", code)
	}
}

// TestHostileInputs sends bad and hostile bodies: each gets a 400 naming
// the field, and nothing is stored.
func TestHostileInputs(t *testing.T) {
	v := newEnv(t)
	base := func(field, value string) string {
		m := map[string]any{"webroot_id": v.webroot, "schedule": "* * * * *", "command": "true"}
		var val any
		if err := json.Unmarshal([]byte(value), &val); err != nil {
			t.Fatalf("bad test value %s", value)
		}
		m[field] = val
		b, _ := json.Marshal(m)
		return string(b)
	}
	cases := []struct{ field, value string }{
		{"schedule", `"* * * *"`}, {"schedule", `"*/0 * * * *"`}, {"schedule", `"0 0 31 2 *"`},
		{"schedule", `"* * L * *"`}, {"schedule", `"@reboot"`}, {"schedule", `"* * * * *\nExecStartPre=/bin/sh"`},
		{"schedule", `""`}, {"schedule", `5`},
		{"timezone", `"EST"`}, {"timezone", `"+02:00"`}, {"timezone", `"Europe/Berlin\n[Service]"`}, {"timezone", `"../../etc/passwd"`}, {"timezone", `""`},
		{"command", `""`}, {"command", `"echo hi\n[Service]\nExecStartPre=/bin/sh -c 'rm -rf /'"`}, {"command", `"a\u0000b"`},
		{"command", `"` + strings.Repeat("x", 5000) + `"`},
		{"working_directory", `"../../etc"`}, {"working_directory", `"/etc"`}, {"working_directory", `"a/../../b"`},
		{"working_directory", `"a b"`}, {"working_directory", `"%h/x"`}, {"working_directory", `"$HOME"`}, {"working_directory", `"a\nb"`},
		{"timeout_seconds", `0`}, {"timeout_seconds", `86401`}, {"timeout_seconds", `"300"`},
		{"max_memory_mb", `1`}, {"max_memory_mb", `100000`}, {"max_failures", `-1`}, {"max_failures", `1001`},
		{"webroot_id", `"not-a-uuid"`}, {"webroot_id", `"00000000-0000-0000-0000-000000000000"`},
		{"enabled", `"yes"`}, {"status", `"active"`}, {"consecutive_failures", `0`},
	}
	for _, c := range cases {
		code, out := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, base(c.field, c.value))
		var pr Problem
		_ = json.Unmarshal(out, &pr)
		if code != 400 || pr.Error.Field != c.field {
			t.Errorf("%s=%s: %d %s, want 400 naming %s", c.field, c.value, code, out, c.field)
		}
	}
	for _, body := range []string{`{`, `[]`, `{"schedule":"* * * * *"} {}`, `{"command":"true"}`} {
		if code, _ := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body); code != 400 {
			t.Errorf("body %q: %d, want 400", body, code)
		}
	}
	if n := v.count(`SELECT count(*) FROM cron_jobs`); n != 0 {
		t.Errorf("%d jobs stored from bad input", n)
	}
	// Updates: a bad field changes nothing.
	id := v.createJob("")["id"].(string)
	for _, body := range []string{`{"schedule":"61 * * * *"}`, `{"command":"a\nb"}`, `{"timezone":"CET"}`, `{"version":9}`} {
		if code, _ := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, body); code != 400 {
			t.Errorf("update %s: %d, want 400", body, code)
		}
	}
	j, _ := v.store.GetJob(context.Background(), id)
	if j.Version != 1 || j.Schedule != "*/5 * * * *" || j.Command != "php artisan schedule:run" {
		t.Errorf("bad updates changed the job: %+v", j)
	}
	// Admin inputs that would reach unit files.
	for _, body := range []string{
		`{"name":"evil\nx","shard_id":"` + v.shardID + `","linux_user":"evil"}`,
		`{"name":"evil","shard_id":"` + v.shardID + `","linux_user":"root;id"}`,
		`{"name":"Evil","shard_id":"` + v.shardID + `","linux_user":"evil"}`,
		`{"name":"evil","shard_id":"` + v.shardID + `","linux_user":"evil","linux_group":"a b"}`,
	} {
		if code, _ := v.do("POST", "/api/v1/admin/tenants", adminKey, body); code != 400 {
			t.Errorf("tenant %s: %d, want 400", body, code)
		}
	}
	for _, p := range []string{`"relative"`, `"/srv/../etc"`, `"/srv/a b"`, `"/srv/%h"`, `"/srv/x\n[Service]"`} {
		if code, _ := v.do("POST", "/api/v1/admin/tenants/"+v.tenant+"/webroots", adminKey, `{"path":`+p+`}`); code != 400 {
			t.Errorf("webroot %s: %d, want 400", p, code)
		}
	}
}

func TestOutcomesIdempotentAndAutoDisable(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"max_failures":3`)["id"].(string)
	v.activate(id)
	slot := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return slot.Add(time.Duration(i) * 5 * time.Minute) }

	// Authentication and shard checks.
	if code, _ := v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", "wrong", `{}`); code != 401 {
		t.Errorf("unknown node credential = %d, want 401", code)
	}
	otherShard := v.mustJSON("POST", "/api/v1/admin/shards", adminKey, `{"name":"web-2","web_storage_dir":"/srv/shared/www2"}`, 201)["id"].(string)
	otherNode := v.mustJSON("POST", "/api/v1/admin/shards/"+otherShard+"/nodes", adminKey, `{"name":"node9"}`, 201)["credential"].(string)
	body := fmt.Sprintf(`{"run_key":"%s#scheduled#%s","version":1,"scheduled_at":"%s","result":"success"}`, id, at(0).Format(time.RFC3339), at(0).Format(time.RFC3339))
	if code, _ := v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", otherNode, body); code != 404 {
		t.Errorf("node of another shard = %d, want 404", code)
	}
	for _, bad := range []string{
		`{"run_key":"x","scheduled_at":"2026-11-21T10:00:00Z","result":"success"}`,
		fmt.Sprintf(`{"run_key":"%s#scheduled#2026-11-21T10:00:00Z","version":1,"scheduled_at":"2026-11-21T10:05:00Z","result":"success"}`, id),
		fmt.Sprintf(`{"run_key":"%s#scheduled#2026-11-21T10:00:00Z","version":1,"scheduled_at":"2026-11-21T10:00:00Z","result":"great"}`, id),
		fmt.Sprintf(`{"run_key":"%s#scheduled#2026-11-21T10:00:00Z","scheduled_at":"2026-11-21T10:00:00Z","result":"success"}`, id),
		fmt.Sprintf(`{"run_key":"%s#2026-11-21T10:00:00Z#1","version":1,"scheduled_at":"2026-11-21T10:00:00Z","result":"success"}`, id),
	} {
		if code, _ := v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, bad); code != 400 {
			t.Errorf("bad outcome %s = %d, want 400", bad, code)
		}
	}

	// Two failures, then the first again: a redelivery changes nothing.
	for i := 0; i < 2; i++ {
		if code, m := v.outcome(id, at(i), 1, "exit_code"); code != 200 || m["duplicate"] != false {
			t.Fatalf("outcome %d: %d %v", i, code, m)
		}
	}
	if _, m := v.outcome(id, at(0), 1, "exit_code"); m["duplicate"] != true || m["consecutive_failures"] != 2.0 {
		t.Errorf("redelivery: %v", m)
	}
	// An overlap skip counts neither way; a success resets.
	v.outcome(id, at(2), 1, "overlap_skipped")
	if j, _ := v.store.GetJob(context.Background(), id); j.ConsecutiveFailures != 2 {
		t.Errorf("after overlap skip: %d failures, want 2", j.ConsecutiveFailures)
	}
	v.outcome(id, at(3), 1, "success")
	if j, _ := v.store.GetJob(context.Background(), id); j.ConsecutiveFailures != 0 {
		t.Errorf("after success: %d failures, want 0", j.ConsecutiveFailures)
	}
	// Three failures in a row: auto-disabled, and the disable is queued once.
	for i, r := range []string{"timeout", "oom", "signal"} {
		_, m := v.outcome(id, at(4+i), 1, r)
		if (i == 2) != (m["auto_disabled"] == true) {
			t.Errorf("failure %d (%s): %v", i+1, r, m)
		}
	}
	v.outcome(id, at(7), 1, "exit_code") // in flight when it was disabled
	j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200)
	if j["status"] != "auto_disabled" || j["enabled"] != false || j["next_run_at"] != nil || j["consecutive_failures"] != 4.0 {
		t.Errorf("after threshold: %v", j)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'auto_disable'`, id); n != 1 {
		t.Errorf("%d auto_disable tasks, want 1", n)
	}
	// Nothing overwrites auto_disabled but enable/retry: not an update, not a
	// late provisioning result.
	v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"php artisan fixed","enabled":true}`, 200)
	jj, _ := v.store.GetJob(context.Background(), id)
	if ok, _ := v.store.SetProvisioned(context.Background(), id, jj.Version, "active", "", 1); ok {
		t.Error("a provisioning result overwrote auto_disabled")
	}
	if jj.Status != "auto_disabled" || jj.Enabled {
		t.Errorf("update lifted auto-disable: %+v", jj)
	}
	en := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/enable", v.key, "", 202)
	if en["status"] != "pending" || en["enabled"] != true || en["consecutive_failures"] != 0.0 {
		t.Errorf("enable after auto-disable: %v", en)
	}
	runs := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?limit=3", v.key, "", 200)["runs"].([]any)
	if len(runs) != 3 || runs[0].(map[string]any)["result"] != "exit_code" || runs[0].(map[string]any)["duration_ms"] != 2000.0 {
		t.Errorf("runs: %v", runs)
	}
}

// TestAutoDisableUnderConcurrentOutcomes posts many failing outcomes of one
// job at once: every one is counted, and the job is disabled exactly once.
func TestAutoDisableUnderConcurrentOutcomes(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"max_failures":5`)["id"].(string)
	v.activate(id)
	const n = 40
	base := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	var mu sync.Mutex
	tripped := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for r := 0; r < 2; r++ { // each outcome delivered twice
				code, m := v.outcome(id, base.Add(time.Duration(i)*time.Minute), 1, "exit_code")
				if code != 200 {
					t.Errorf("outcome %d: %d %v", i, code, m)
				}
				if m["auto_disabled"] == true {
					mu.Lock()
					tripped++
					mu.Unlock()
				}
			}
		}(i)
	}
	wg.Wait()
	j, _ := v.store.GetJob(context.Background(), id)
	if j.ConsecutiveFailures != n || j.Status != "auto_disabled" || j.Enabled {
		t.Errorf("job after %d concurrent failures: %+v", n, j)
	}
	if tripped != 1 {
		t.Errorf("%d outcomes reported tripping auto-disable, want 1", tripped)
	}
	if c := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'auto_disable'`, id); c != 1 {
		t.Errorf("%d auto_disable tasks, want 1", c)
	}
	if c := v.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, id); c != n {
		t.Errorf("%d runs stored, want %d", c, n)
	}
}

func TestSweepLostRuns(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"schedule":"* * * * *","timeout_seconds":60,"max_failures":0`)["id"].(string)
	v.activate(id)
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	// Pretend the job has been active for ten minutes.
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, id, now.Add(-10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	reported := now.Add(-5*time.Minute - 30*time.Second) // a slot a node reported
	v.outcome(id, reported, 1, "success")
	rep, err := v.store.SweepLostRuns(context.Background(), now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	lost := rep.Lost
	// Slots from -9:30 to -2:30 (cutoff = now - 60s timeout - 60s grace),
	// one of which was reported: 8 slots, 7 lost.
	if lost != 7 {
		t.Errorf("lost = %d, want 7", lost)
	}
	if again, _ := v.store.SweepLostRuns(context.Background(), now, time.Minute); again.Lost != 0 {
		t.Errorf("second sweep recorded %d more", again.Lost)
	}
	// A late outcome replaces the lost record, and is not a duplicate.
	late := now.Add(-3*time.Minute - 30*time.Second)
	if _, m := v.outcome(id, late, 1, "success"); m["duplicate"] != false {
		t.Errorf("late outcome: %v", m)
	}
	if c := v.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'lost'`, id); c != 6 {
		t.Errorf("%d lost runs after the late outcome, want 6", c)
	}
	if _, m := v.outcome(id, late, 1, "success"); m["duplicate"] != true {
		t.Errorf("late outcome again: %v", m)
	}
	// Retention.
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE cron_job_runs SET received_at = now() - interval '181 days' WHERE result = 'lost'`); err != nil {
		t.Fatal(err)
	}
	if n, err := v.store.DeleteRunsBefore(context.Background(), time.Now().Add(-180*24*time.Hour)); err != nil || n != 6 {
		t.Errorf("retention removed %d (%v), want 6", n, err)
	}
}
