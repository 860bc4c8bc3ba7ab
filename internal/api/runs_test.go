package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
)

func TestCursors(t *testing.T) {
	at := time.Date(2026, 11, 21, 12, 0, 0, 123456000, time.UTC)
	rp := store.RunPos{ScheduledAt: at, ID: 42}
	if got, ok := decodeRunCursor(encodeRunCursor(rp)); !ok || got.ID != 42 || !got.ScheduledAt.Equal(at) {
		t.Errorf("runs cursor round trip: %+v %v", got, ok)
	}
	jp := store.JobPos{CreatedAt: at, ID: "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"}
	if got, ok := decodeJobCursor(encodeJobCursor(jp)); !ok || got != jp {
		t.Errorf("jobs cursor round trip: %+v %v", got, ok)
	}
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, bad := range []string{
		"", "!!!", b64("r1.123"), b64("r1.abc.4"), b64("r1.123.0"), b64("r1.123.-4"), b64("r1.123.04"),
		b64("r1.123.4.5"), b64("r2.123.4"), encodeJobCursor(jp), b64("r1.123.4") + "=", strings.Repeat("A", 300),
	} {
		if _, ok := decodeRunCursor(bad); ok {
			t.Errorf("runs cursor %q accepted", bad)
		}
	}
	for _, bad := range []string{b64("j1.123.not-a-uuid"), encodeRunCursor(rp), b64("j1.x." + jp.ID)} {
		if _, ok := decodeJobCursor(bad); ok {
			t.Errorf("jobs cursor %q accepted", bad)
		}
	}
}

func TestCheckText(t *testing.T) {
	for s, ok := range map[string]bool{
		"": true, "nightly backup": true, "Sicherung über Nacht ✓": true, strings.Repeat("é", 100): true,
		strings.Repeat("x", 101): false, "a\nb": false, "a\tb": false, "a\x00b": false, "\u202eevil": false,
		"a\x1b[31mred": false, "\xff": false,
	} {
		if err := checkText("name", s, 100); (err == nil) != ok {
			t.Errorf("checkText(%q) = %v, want ok %v", s, err, ok)
		}
	}
}

func TestRunRef(t *testing.T) {
	const job = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	const other = "1b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	for _, tc := range []struct {
		param string
		id    int64
		key   string
		ok    bool
	}{
		{"17", 17, "", true},
		{url.PathEscape(job + "#manual#42"), 0, job + "#manual#42", true},
		{url.PathEscape(job + "#scheduled#2026-11-21T12:00:00Z"), 0, job + "#scheduled#2026-11-21T12:00:00Z", true},
		{url.PathEscape(other + "#manual#42"), 0, "", false}, // another job's key
		{"0", 0, "", false}, {"-3", 0, "", false}, {"017", 0, "", false}, {"", 0, "", false},
		{url.PathEscape(job + "#scheduled#2026-11-21T13:00:00+01:00"), 0, "", false}, // not canonical
		{"%zz", 0, "", false}, {"abc", 0, "", false},
	} {
		id, key, ok := runRef(job, tc.param)
		if ok != tc.ok || id != tc.id || (tc.key != "" && key.String() != tc.key) {
			t.Errorf("runRef(%q) = %d %q %v, want %d %q %v", tc.param, id, key.String(), ok, tc.id, tc.key, tc.ok)
		}
	}
}

// The name joins a create's identity only when given, so a retried create
// across the upgrade that added names hashes as before.
func TestIdempotencyHashWithoutName(t *testing.T) {
	f := store.JobFields{WebrootID: "w", Schedule: "* * * * *", Command: "true"}
	b, _ := json.Marshal(idempotencyFields{JobFields: f})
	if strings.Contains(string(b), `"name"`) {
		t.Errorf("hash input without a name mentions it: %s", b)
	}
	f.Name = "nightly"
	b, _ = json.Marshal(idempotencyFields{JobFields: f, Name: f.Name})
	if strings.Count(string(b), `"name":"nightly"`) != 1 {
		t.Errorf("hash input with a name: %s", b)
	}
}

// manualOutcome posts a run-now outcome as the env's node.
func (v *env) manualOutcome(jobID, request string, at time.Time, result string) {
	v.t.Helper()
	body := map[string]any{"run_key": jobID + "#manual#" + request, "version": 1, "scheduled_at": at.UTC(),
		"started_at": at, "finished_at": at.Add(time.Second), "result": result}
	if result != "success" {
		body["failure_reason"] = "manual " + result
		body["exit_code"] = 2
	}
	b, _ := json.Marshal(body)
	if code, out := v.do("POST", "/internal/v1/cron-jobs/"+jobID+"/outcome", v.node, string(b)); code != 200 {
		v.t.Fatalf("manual outcome: %d %s", code, out)
	}
}

func runKeys(m map[string]any) []string {
	var out []string
	for _, r := range m["runs"].([]any) {
		out = append(out, r.(map[string]any)["run_key"].(string))
	}
	return out
}

func TestRunsPagingAndFilters(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"max_failures":0`)["id"].(string)
	v.activate(id)
	base := time.Now().UTC().Truncate(5 * time.Minute).Add(-time.Hour)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 5 * time.Minute) }
	results := []string{"success", "exit_code", "success", "overlap_skipped", "timeout", "success", "platform_error"}
	// Delivered out of order: the listing orders by slot, not by arrival.
	for _, i := range []int{3, 0, 6, 1, 5, 2, 4} {
		if code, m := v.outcome(id, at(i), 1, results[i]); code != 200 {
			t.Fatalf("outcome %d: %d %v", i, code, m)
		}
	}
	v.manualOutcome(id, "900", at(2).Add(time.Minute), "exit_code")
	key := func(i int) string { return id + "#scheduled#" + at(i).Format(time.RFC3339) }
	manual := id + "#manual#900"
	all := []string{key(6), key(5), key(4), key(3), manual, key(2), key(1), key(0)}

	// Page through with limit 3: every run once, newest slot first.
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		q := "?limit=3"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		m := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs"+q, v.key, "", 200)
		seen = append(seen, runKeys(m)...)
		if m["next_cursor"] == nil {
			break
		}
		cursor = m["next_cursor"].(string)
	}
	if strings.Join(seen, ",") != strings.Join(all, ",") {
		t.Errorf("paged runs:\n%v\nwant\n%v", seen, all)
	}
	// A run recorded after the first page was read does not shift the
	// next page: the cursor names a position, not an offset.
	first := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?limit=2", v.key, "", 200)
	v.outcome(id, at(7), 1, "success")
	next := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?limit=2&cursor="+url.QueryEscape(first["next_cursor"].(string)), v.key, "", 200)
	if got := runKeys(next); strings.Join(got, ",") != key(4)+","+key(3) {
		t.Errorf("second page after an insert: %v", got)
	}
	// Every run says its trigger and attempt.
	for _, r := range v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)["runs"].([]any) {
		run := r.(map[string]any)
		want := "scheduled"
		if run["run_key"] == manual {
			want = "manual"
		}
		if run["trigger"] != want || run["attempt"] != 1.0 {
			t.Errorf("run %v: trigger %v attempt %v, want %s 1", run["run_key"], run["trigger"], run["attempt"], want)
		}
	}
	for q, want := range map[string][]string{
		"result=success":                     {key(7), key(5), key(2), key(0)},
		"result=exit_code,timeout":           {key(4), manual, key(1)},
		"trigger=manual":                     {manual},
		"trigger=scheduled&result=exit_code": {key(1)},
		"from=" + at(2).Format(time.RFC3339) + "&to=" + at(4).Format(time.RFC3339): {key(3), manual, key(2)},
		"to=" + at(1).Format(time.RFC3339):                                         {key(0)},
		"result=lost":                                                              nil,
	} {
		m := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?"+strings.ReplaceAll(q, "+", "%2B"), v.key, "", 200)
		if got := runKeys(m); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: %v, want %v", q, got, want)
		}
	}
	jobCursor := encodeJobCursor(store.JobPos{CreatedAt: base, ID: id})
	for q, field := range map[string]string{
		"limit=0": "limit", "limit=1001": "limit", "cursor=garbage": "cursor", "cursor=" + jobCursor: "cursor",
		"result=great": "result", "result=success,": "result", "trigger=cron": "trigger", "from=yesterday": "from",
		"to=2026-13-01T00:00:00Z": "to", "from=" + at(3).Format(time.RFC3339) + "&to=" + at(3).Format(time.RFC3339): "to",
	} {
		code, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/runs?"+q, v.key, "")
		var pr Problem
		_ = json.Unmarshal(out, &pr)
		if code != 400 || pr.Error.Field != field {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, out, field)
		}
	}
}

// The job shows its newest slot's run, however the outcomes arrive: out of
// order, through a spool, or replacing a lost record.
func TestLastRunFollowsTheNewestSlot(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"schedule":"* * * * *","timeout_seconds":60,"max_failures":0`)["id"].(string)
	v.activate(id)
	now := time.Now().UTC().Truncate(time.Minute).Add(30 * time.Second)
	slot := func(i int) time.Time { return now.Add(time.Duration(i)*time.Minute - 30*time.Second) }
	job := func() map[string]any { return v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200) }
	if j := job(); j["last_run_at"] != nil || j["last_result"] != nil || j["last_success_at"] != nil || j["last_failure_reason"] != "" {
		t.Fatalf("a job without runs shows %v", j)
	}
	v.outcome(id, slot(-3), 1, "exit_code")
	v.outcome(id, slot(-5), 1, "success") // an older slot, later
	j := job()
	if j["last_run_at"] != slot(-3).Format(time.RFC3339) || j["last_result"] != "exit_code" || j["last_success_at"] != slot(-5).Format(time.RFC3339) {
		t.Errorf("after an older success arrived late: %v %v %v", j["last_run_at"], j["last_result"], j["last_success_at"])
	}
	// The sweeper records -10..-4 lost (cutoff now - 2 min), none moves
	// the last run; a late result replacing the lost -4 does not either.
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, id, now.Add(-11*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if rep, err := v.store.SweepLostRuns(context.Background(), now, time.Minute); err != nil || rep.Lost == 0 {
		t.Fatalf("sweep: %+v %v", rep, err)
	}
	if _, m := v.outcome(id, slot(-4), 1, "success"); m["duplicate"] != false {
		t.Fatalf("late outcome for a lost slot: %v", m)
	}
	j = job()
	if j["last_run_at"] != slot(-3).Format(time.RFC3339) || j["last_result"] != "exit_code" || j["last_success_at"] != slot(-4).Format(time.RFC3339) {
		t.Errorf("after a late result replaced a lost record: %v %v %v", j["last_run_at"], j["last_result"], j["last_success_at"])
	}
	// An overlap skip of the newest slot, then the real result of that
	// slot replacing it.
	v.outcome(id, slot(-1), 1, "overlap_skipped")
	if j := job(); j["last_result"] != "overlap_skipped" {
		t.Errorf("newest slot skipped: %v", j["last_result"])
	}
	v.outcome(id, slot(-1), 1, "exit_code")
	j = job()
	if j["last_run_at"] != slot(-1).Format(time.RFC3339) || j["last_result"] != "exit_code" || j["last_failure_reason"] != "" {
		t.Errorf("real result replacing the skip: %v %v %q", j["last_run_at"], j["last_result"], j["last_failure_reason"])
	}
	// A failure with a reason, then a success: the reason goes with it.
	code, _ := v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, fmt.Sprintf(
		`{"run_key":"%s#scheduled#%s","version":1,"scheduled_at":"%s","result":"timeout","failure_reason":"killed after 60s"}`,
		id, slot(0).Format(time.RFC3339), slot(0).Format(time.RFC3339)))
	if code != 200 {
		t.Fatalf("timeout outcome: %d", code)
	}
	if j := job(); j["last_result"] != "timeout" || j["last_failure_reason"] != "killed after 60s" {
		t.Errorf("timeout: %v %q", j["last_result"], j["last_failure_reason"])
	}
	// The listing shows the same.
	list := v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)["cron_jobs"].([]any)
	if l := list[0].(map[string]any); l["last_result"] != "timeout" || l["last_run_at"] != slot(0).Format(time.RFC3339) {
		t.Errorf("listing: %v %v", l["last_result"], l["last_run_at"])
	}
}

func TestRunNowAnswersItsRun(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	v.activate(id)
	code, hdr, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", nil)
	if code != 202 {
		t.Fatalf("run-now: %d %s", code, out)
	}
	var acc map[string]any
	_ = json.Unmarshal(out, &acc)
	key, _ := acc["run_key"].(string)
	request := strings.TrimPrefix(key, id+"#manual#")
	if !strings.HasPrefix(key, id+"#manual#") || v.count(`SELECT count(*) FROM cron_job_tasks WHERE id = $1::bigint AND cron_job_id = $2 AND action = 'run_now'`, request, id) != 1 {
		t.Fatalf("run-now answered run key %q, not its request's", key)
	}
	if acc["id"] != id || acc["status"] != "active" || hdr.Get("ETag") != `"1"` {
		t.Errorf("run-now no longer answers the job: %v (ETag %s)", acc, hdr.Get("ETag"))
	}
	loc := hdr.Get("Location")
	if loc != "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key) {
		t.Fatalf("Location %q", loc)
	}
	q := v.mustJSON("GET", loc, v.key, "", 200)
	if q["result"] != "queued" || q["run_key"] != key || q["trigger"] != "manual" || q["requested_at"] == nil {
		t.Errorf("queued run: %v", q)
	}
	// A manual key of the job that was never requested is not queued.
	for _, p := range []string{url.PathEscape(id + "#manual#999999"), url.PathEscape(id + "#manual#abc"), "999999"} {
		if code, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/runs/"+p, v.key, ""); code != 404 {
			t.Errorf("run %s: %d %s, want 404", p, code, out)
		}
	}
	// Once a node reports it, the same location is the record.
	v.manualOutcome(id, request, time.Now().Add(-time.Second), "success")
	r := v.mustJSON("GET", loc, v.key, "", 200)
	if r["result"] != "success" || r["run_key"] != key || r["trigger"] != "manual" || r["attempt"] != 1.0 {
		t.Errorf("reported run: %v", r)
	}
	byID := v.mustJSON("GET", fmt.Sprintf("/api/v1/cron-jobs/%s/runs/%.0f", id, r["id"].(float64)), v.key, "", 200)
	if byID["run_key"] != key {
		t.Errorf("run by id: %v", byID)
	}
	if j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); j["last_result"] != "success" {
		t.Errorf("a run-now is the job's last run: %v", j["last_result"])
	}

	// Another tenant sees none of it: not through its own job, not by id.
	otherTenant, otherWebroot, otherKey := v.addTenant("globex", v.shardID)
	other := v.mustJSON("POST", "/api/v1/tenants/"+otherTenant+"/cron-jobs", otherKey,
		`{"webroot_id":"`+otherWebroot+`","schedule":"* * * * *","command":"true"}`, 201)["id"].(string)
	runID := fmt.Sprintf("%.0f", r["id"].(float64))
	for _, path := range []string{
		loc, "/api/v1/cron-jobs/" + id + "/runs/" + runID, "/api/v1/cron-jobs/" + id + "/runs",
		"/api/v1/cron-jobs/" + other + "/runs/" + runID, "/api/v1/cron-jobs/" + other + "/runs/" + url.PathEscape(key),
	} {
		if code, out := v.do("GET", path, otherKey, ""); code != 404 {
			t.Errorf("GET %s with another tenant's key: %d %s, want 404", path, code, out)
		}
	}
	if code, _ := v.do("POST", "/api/v1/cron-jobs/"+id+"/run-now", otherKey, ""); code != 404 {
		t.Errorf("run-now of another tenant's job: %d", code)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now'`, id); n != 1 {
		t.Errorf("%d run-now tasks, want 1", n)
	}
}

func TestDisableReason(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	path := "/api/v1/cron-jobs/" + id
	for _, body := range []string{
		`{"reason":"a\nb"}`, `{"reason":"` + strings.Repeat("x", 501) + `"}`, `{"reason":5}`, `{"why":"x"}`, `{"reason":"\u202e"}`, `[`,
	} {
		code, out := v.do("POST", path+"/disable", v.key, body)
		if code != 400 {
			t.Errorf("disable %s: %d %s, want 400", body, code, out)
		}
	}
	if j, _ := v.store.GetJob(context.Background(), id); !j.Enabled || j.Version != 1 || j.DisabledReason != "" {
		t.Fatalf("bad disables changed the job: %+v", j)
	}
	d := v.mustJSON("POST", path+"/disable", v.key, `{"reason":"migrating to the new server"}`, 202)
	if d["enabled"] != false || d["disabled_reason"] != "migrating to the new server" {
		t.Errorf("disable with reason: %v", d)
	}
	v.mustJSON("POST", path+"/disable", v.key, "", 202) // no body: the reason stays
	u := v.mustJSON("PUT", path, v.key, `{"command":"true"}`, 200)
	if u["disabled_reason"] != "migrating to the new server" {
		t.Errorf("after a second disable and an edit: %v", u["disabled_reason"])
	}
	e := v.mustJSON("POST", path+"/enable", v.key, "", 202)
	if e["disabled_reason"] != "" {
		t.Errorf("enabled job keeps its disable reason: %v", e["disabled_reason"])
	}
	v.mustJSON("POST", path+"/disable", v.key, `{}`, 202)
	if j := v.mustJSON("GET", path, v.key, "", 200); j["disabled_reason"] != "" {
		t.Errorf("a disable without reason after enable: %v", j["disabled_reason"])
	}
	v.mustJSON("POST", path+"/disable", v.key, `{"reason":"again"}`, 202)
	if j := v.mustJSON("PUT", path, v.key, `{"enabled":true}`, 200); j["disabled_reason"] != "" {
		t.Errorf("enabled by an update, the reason stays: %v", j["disabled_reason"])
	}
	// An older replica's enable leaves the column: an enabled job shows none.
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE cron_jobs SET disabled_reason = 'stale' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if j := v.mustJSON("GET", path, v.key, "", 200); j["disabled_reason"] != "" {
		t.Errorf("an enabled job shows a disable reason: %v", j["disabled_reason"])
	}
}

func TestJobNameAndListing(t *testing.T) {
	v := newEnv(t)
	a := v.createJob(`,"name":"Nightly backup ✓"`)
	if a["name"] != "Nightly backup ✓" {
		t.Errorf("name: %v", a["name"])
	}
	for _, name := range []string{`"a\nb"`, `"` + strings.Repeat("n", 101) + `"`, `"\u0000"`, `"\u202eexe.php"`, `7`} {
		code, out := v.do("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key,
			`{"webroot_id":"`+v.webroot+`","schedule":"* * * * *","command":"true","name":`+name+`}`)
		var pr Problem
		_ = json.Unmarshal(out, &pr)
		if code != 400 || pr.Error.Field != "name" {
			t.Errorf("name %s: %d %s, want 400 naming name", name, code, out)
		}
		if code, _ := v.do("PUT", "/api/v1/cron-jobs/"+a["id"].(string), v.key, `{"name":`+name+`}`); code != 400 {
			t.Errorf("update to name %s: %d, want 400", name, code)
		}
	}
	if u := v.mustJSON("PUT", "/api/v1/cron-jobs/"+a["id"].(string), v.key, `{"schedule":"0 * * * *"}`, 200); u["name"] != "Nightly backup ✓" {
		t.Errorf("an update without name dropped it: %v", u["name"])
	}
	b := v.createJob("")
	c := v.createJob(`,"name":"third"`)
	v.activate(b["id"].(string))
	ids := func(m map[string]any) (out []string) {
		for _, j := range m["cron_jobs"].([]any) {
			out = append(out, j.(map[string]any)["id"].(string))
		}
		return out
	}
	list := "/api/v1/tenants/" + v.tenant + "/cron-jobs"
	all := v.mustJSON("GET", list, v.key, "", 200)
	if got := ids(all); len(got) != 3 || all["next_cursor"] != nil {
		t.Fatalf("default listing: %v %v", got, all["next_cursor"])
	}
	p1 := v.mustJSON("GET", list+"?limit=2", v.key, "", 200)
	p2 := v.mustJSON("GET", list+"?limit=2&cursor="+url.QueryEscape(p1["next_cursor"].(string)), v.key, "", 200)
	if got := append(ids(p1), ids(p2)...); strings.Join(got, ",") != strings.Join([]string{a["id"].(string), b["id"].(string), c["id"].(string)}, ",") || p2["next_cursor"] != nil {
		t.Errorf("pages: %v then %v", ids(p1), ids(p2))
	}
	if got := ids(v.mustJSON("GET", list+"?status=active", v.key, "", 200)); len(got) != 1 || got[0] != b["id"] {
		t.Errorf("status=active: %v", got)
	}
	if got := ids(v.mustJSON("GET", list+"?status=pending,failed&limit=1", v.key, "", 200)); len(got) != 1 || got[0] != a["id"] {
		t.Errorf("status=pending,failed&limit=1: %v", got)
	}
	runCursor := encodeRunCursor(store.RunPos{ScheduledAt: time.Now(), ID: 1})
	for q, field := range map[string]string{"status=running": "status", "cursor=x": "cursor", "cursor=" + runCursor: "cursor", "limit=1001": "limit"} {
		code, out := v.do("GET", list+"?"+q, v.key, "")
		var pr Problem
		_ = json.Unmarshal(out, &pr)
		if code != 400 || pr.Error.Field != field {
			t.Errorf("%s: %d %s, want 400 naming %s", q, code, out, field)
		}
	}
	// Another tenant's cursor position reveals nothing of this tenant.
	otherTenant, _, otherKey := v.addTenant("globex", v.shardID)
	if m := v.mustJSON("GET", "/api/v1/tenants/"+otherTenant+"/cron-jobs?cursor="+url.QueryEscape(p1["next_cursor"].(string)), otherKey, "", 200); len(ids(m)) != 0 {
		t.Errorf("another tenant's listing with this tenant's cursor: %v", ids(m))
	}
}

// A run can be cancelled while it is queued or running: 202 with its
// location and one cancel task in the outbox, carrying its key. Once it has
// a result it cannot (409), a future slot has nothing to stop (409), and
// another tenant or a read-only key cannot cancel it (404, 403), all
// without a task.
func TestCancelRun(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	v.activate(id)
	_, _, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", nil)
	var acc map[string]any
	_ = json.Unmarshal(out, &acc)
	key := acc["run_key"].(string)
	request := strings.TrimPrefix(key, id+"#manual#")
	cancelPath := "/api/v1/cron-jobs/" + id + "/runs/" + url.PathEscape(key) + "/cancel"
	tasks := func() int {
		return v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'cancel'`, id)
	}

	_, _, otherKey := v.addTenant("globex", v.shardID)
	if code, out := v.do("POST", cancelPath, otherKey, ""); code != 404 {
		t.Errorf("another tenant's cancel: %d %s, want 404", code, out)
	}
	ro := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","read_only":true}`, 201)["key"].(string)
	if code, out := v.do("POST", cancelPath, ro, ""); code != 403 {
		t.Errorf("a read-only key's cancel: %d %s, want 403", code, out)
	}
	if n := tasks(); n != 0 {
		t.Fatalf("refused cancels queued %d tasks", n)
	}

	code, hdr, out := v.doHeaders("POST", cancelPath, v.key, "", nil)
	if code != 202 {
		t.Fatalf("cancel: %d %s", code, out)
	}
	var got map[string]any
	_ = json.Unmarshal(out, &got)
	if got["run_key"] != key || got["cron_job_id"] != id || got["state"] != "cancel_requested" {
		t.Errorf("cancel answered %v", got)
	}
	if loc := hdr.Get("Location"); loc != "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key) {
		t.Errorf("Location %q", loc)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'cancel' AND run_key = $2`, id, key); n != 1 {
		t.Fatalf("%d cancel tasks with the run's key, want 1", n)
	}

	v.manualOutcome(id, request, time.Now().Add(-time.Second), "cancelled")
	if r := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key), v.key, "", 200); r["result"] != "cancelled" {
		t.Errorf("the cancelled run reads %v", r["result"])
	}
	if code, out := v.do("POST", cancelPath, v.key, ""); code != 409 {
		t.Errorf("cancel of an ended run: %d %s, want 409", code, out)
	}
	future := url.PathEscape(id + "#scheduled#" + time.Now().UTC().Add(time.Hour).Truncate(time.Minute).Format(time.RFC3339))
	if code, out := v.do("POST", "/api/v1/cron-jobs/"+id+"/runs/"+future+"/cancel", v.key, ""); code != 409 {
		t.Errorf("cancel of a future slot: %d %s, want 409", code, out)
	}
	for _, p := range []string{url.PathEscape(id + "#manual#999999"), "not-a-run", url.PathEscape(otherJobKey(id))} {
		if code, out := v.do("POST", "/api/v1/cron-jobs/"+id+"/runs/"+p+"/cancel", v.key, ""); code != 404 {
			t.Errorf("cancel of %s: %d %s, want 404", p, code, out)
		}
	}
	if n := tasks(); n != 1 {
		t.Errorf("%d cancel tasks, want only the accepted one", n)
	}
}

// otherJobKey is a well-formed run key of a job other than id.
func otherJobKey(string) string {
	return "00000000-0000-4000-8000-000000000000#scheduled#2026-11-22T12:00:00Z"
}

// TestRunningRuns: a node's start report shows the run as running (its
// own GET, the head of the runs listing, the result=running filter, the
// job's running_since) until its outcome is recorded; a start of another
// shard's job or a malformed one is refused and shows nothing.
func TestRunningRuns(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	v.activate(id)
	_, _, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", nil)
	var acc map[string]any
	_ = json.Unmarshal(out, &acc)
	key := acc["run_key"].(string)
	request := strings.TrimPrefix(key, id+"#manual#")
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	start := func(node, runKey string) (int, []byte) {
		b, _ := json.Marshal(map[string]any{"run_key": runKey, "version": 1, "scheduled_at": at, "started_at": at.Add(time.Second),
			"invocation_id": "0123456789abcdef0123456789abcdef"})
		return v.do("POST", "/internal/v1/cron-jobs/"+id+"/started", node, string(b))
	}
	otherShard := v.mustJSON("POST", "/api/v1/admin/shards", adminKey, `{"name":"web-2","web_storage_dir":"/srv/shared/www2"}`, 201)["id"].(string)
	otherNode := v.mustJSON("POST", "/api/v1/admin/shards/"+otherShard+"/nodes", adminKey, `{"name":"node9"}`, 201)["credential"].(string)
	if code, out := start(otherNode, key); code != 200 || !strings.Contains(string(out), `"noted":false`) {
		t.Errorf("a node of another shard's start: %d %s, want 200 noted false", code, out)
	}
	if code, _ := start(v.node, "00000000-0000-4000-8000-000000000000#manual#1"); code != 400 {
		t.Errorf("a start of another job's key: %d, want 400", code)
	}
	runPath := "/api/v1/cron-jobs/" + id + "/runs/" + url.PathEscape(key)
	if r := v.mustJSON("GET", runPath, v.key, "", 200); r["result"] != "queued" {
		t.Fatalf("before any start the run is %v, want queued", r["result"])
	}
	if code, out := start(v.node, key); code != 200 || !strings.Contains(string(out), `"noted":true`) {
		t.Fatalf("start: %d %s", code, out)
	}
	if code, out := start(v.node, key); code != 200 || !strings.Contains(string(out), `"noted":false`) {
		t.Errorf("a repeated start: %d %s, want noted false", code, out)
	}
	r := v.mustJSON("GET", runPath, v.key, "", 200)
	if r["result"] != "running" || r["started_at"] == nil || r["trigger"] != "manual" {
		t.Fatalf("running run %v", r)
	}
	list := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)["runs"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["result"] != "running" {
		t.Errorf("runs list %v, want the running run at its head", list)
	}
	if only := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?result=running", v.key, "", 200)["runs"].([]any); len(only) != 1 {
		t.Errorf("result=running: %v", only)
	}
	if none := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?result=exit_code", v.key, "", 200)["runs"].([]any); len(none) != 0 {
		t.Errorf("result=exit_code lists %v", none)
	}
	if j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); j["running_since"] == nil {
		t.Errorf("the job shows no running_since: %v", j)
	}
	jobs := v.mustJSON("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "", 200)["cron_jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["running_since"] == nil {
		t.Errorf("the job list shows no running_since: %v", jobs)
	}

	v.manualOutcome(id, request, at, "success")
	if r := v.mustJSON("GET", runPath, v.key, "", 200); r["result"] != "success" {
		t.Errorf("after its outcome the run is %v", r["result"])
	}
	if j := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); j["running_since"] != nil {
		t.Errorf("running_since after the outcome: %v", j["running_since"])
	}
	if n := v.count(`SELECT count(*) FROM cron_job_run_starts WHERE run_key = $1`, key); n != 0 {
		t.Errorf("the start outlived its record (%d rows)", n)
	}
	if code, out := start(v.node, key); code != 200 || !strings.Contains(string(out), `"noted":false`) {
		t.Errorf("a late start of a recorded run: %d %s, want noted false", code, out)
	}
}

// TestRunningCatchUpSaysCatchup: a catch-up runs under its slot's
// scheduled key, so only the node's start report tells it apart: a run in
// progress it reports as catchup lists and reads as catchup, and the
// trigger=catchup filter finds it. A start that claims catchup for a
// manual key is refused and shows nothing.
func TestRunningCatchUpSaysCatchup(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"catchup_window_seconds":600`)["id"].(string)
	v.activate(id)
	slot := time.Now().UTC().Add(-2 * time.Minute).Truncate(time.Minute)
	key := id + "#scheduled#" + slot.Format(time.RFC3339)
	start := func(runKey, trigger string) (int, []byte) {
		b, _ := json.Marshal(map[string]any{"run_key": runKey, "version": 1, "scheduled_at": slot, "started_at": slot.Add(40 * time.Second),
			"invocation_id": "0123456789abcdef0123456789abcdef", "trigger": trigger})
		return v.do("POST", "/internal/v1/cron-jobs/"+id+"/started", v.node, string(b))
	}
	if code, out := start(id+"#manual#7", "catchup"); code != 400 || !strings.Contains(string(out), "trigger") {
		t.Errorf("a manual key's start claiming catchup: %d %s, want 400 naming trigger", code, out)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_run_starts`); n != 0 {
		t.Fatalf("a refused start left %d rows", n)
	}
	if code, out := start(key, "catchup"); code != 200 || !strings.Contains(string(out), `"noted":true`) {
		t.Fatalf("catch-up start: %d %s", code, out)
	}
	r := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key), v.key, "", 200)
	if r["result"] != "running" || r["trigger"] != "catchup" {
		t.Errorf("the catch-up in progress reads %v / %v, want running / catchup", r["result"], r["trigger"])
	}
	only := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?trigger=catchup", v.key, "", 200)["runs"].([]any)
	if len(only) != 1 || only[0].(map[string]any)["trigger"] != "catchup" {
		t.Errorf("trigger=catchup lists %v, want the catch-up in progress", only)
	}
	if none := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?trigger=scheduled", v.key, "", 200)["runs"].([]any); len(none) != 0 {
		t.Errorf("trigger=scheduled lists the catch-up in progress: %v", none)
	}
}
