package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/apiclient"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/wire"
)

const adminKey = "ctl-test-admin-key-0123456789abcdef"

// world is a real core API on a fresh database with a shard, a tenant, a
// webroot and a tenant key, set up through the admin API.
type world struct {
	t                    *testing.T
	url                  string
	tenant, webroot, key string
	setJobStatus         func(id string)
	finishDelete         func(id string)                // as the delete workflow does once the units are gone
	sql                  func(stmt string, args ...any) // writes what the API cannot (a past)
}

func newWorld(t *testing.T) *world {
	st := pgtest.New(t)
	srv := httptest.NewServer(api.New(st, api.Config{AdminKey: adminKey, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	w := &world{t: t, url: srv.URL}
	admin := &apiclient.Client{BaseURL: srv.URL, Key: adminKey}
	ctx := context.Background()
	must := func(path string, body any, field string) string {
		raw, err := admin.Do(ctx, "POST", path, nil, body, nil)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m[field].(string)
	}
	shard := must("/admin/shards", map[string]any{"name": "web-1", "web_storage_dir": "/srv/shared/www"}, "id")
	w.tenant = must("/admin/tenants", map[string]any{"name": "acme", "shard_id": shard, "linux_user": "acme"}, "id")
	w.webroot = must("/admin/tenants/"+w.tenant+"/webroots", map[string]any{"path": "/srv/shared/www/acme/public"}, "id")
	w.key = must("/admin/api-keys", map[string]any{"tenant_id": w.tenant}, "key")
	w.setJobStatus = func(id string) {
		j, err := st.GetJob(ctx, id)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := st.SetProvisioned(ctx, id, j.Version, wire.StatusActive, "", 1); err != nil {
			t.Error(err)
		}
	}
	w.finishDelete = func(id string) {
		if err := st.FinishDelete(ctx, id); err != nil {
			t.Error(err)
		}
	}
	w.sql = func(stmt string, args ...any) {
		if _, err := st.Pool().Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return w
}

// ctl runs hostcronctl with the tenant's key (or the env's) and returns
// what it printed and its error.
func (w *world) ctl(env map[string]string, args ...string) (stdout, stderr string, err error) {
	w.t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		return map[string]string{"HOSTCRON_API": w.url, "HOSTCRON_API_KEY": w.key, "HOSTCRON_TENANT": w.tenant, "HOME": w.t.TempDir()}[k]
	}
	root := newRoot(&out, &errb, getenv)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

func TestJobLifecycleThroughTheCommandLine(t *testing.T) {
	w := newWorld(t)
	out, _, err := w.ctl(nil, "jobs", "create", "-o", "json", "--webroot", w.webroot, "--schedule", "*/5 * * * *",
		"--command", "php artisan schedule:run", "--timezone", "Europe/Berlin", "--timeout", "120")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var created apiclient.Job
	if err := json.Unmarshal([]byte(out), &created); err != nil || created.ID == "" {
		t.Fatalf("create -o json printed %q (%v)", out, err)
	}
	if created.Timezone != "Europe/Berlin" || created.Status != "pending" {
		t.Errorf("created job: %+v", created)
	}

	out, _, err = w.ctl(nil, "jobs", "list")
	if err != nil || !strings.Contains(out, created.ID) || !strings.Contains(out, "*/5 * * * *") || !strings.HasPrefix(out, "ID") {
		t.Errorf("list: %v\n%s", err, out)
	}

	// update sends only the flags given: the timezone stays.
	out, _, err = w.ctl(nil, "jobs", "update", created.ID, "-o", "json", "--command", "php artisan queue:work --once")
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	var updated apiclient.Job
	_ = json.Unmarshal([]byte(out), &updated)
	if updated.Timezone != "Europe/Berlin" || updated.Command != "php artisan queue:work --once" || updated.Version != created.Version+1 {
		t.Errorf("update changed more or less than the command: %+v", updated)
	}

	// A stale --if-match is refused with the API's own words.
	if _, _, err := w.ctl(nil, "jobs", "disable", created.ID, "--if-match", "1"); err == nil || !strings.Contains(err.Error(), "412") {
		t.Errorf("disable at a stale version: %v, want the 412", err)
	}

	// --wait follows provisioning and shows each status it passes.
	go func() {
		time.Sleep(time.Second)
		w.setJobStatus(created.ID)
	}()
	out, progress, err := w.ctl(nil, "jobs", "disable", created.ID, "--wait", "--wait-timeout", "30s")
	if err != nil {
		t.Fatalf("disable --wait: %v", err)
	}
	if !strings.Contains(progress, "pending") || !strings.Contains(progress, "active") {
		t.Errorf("--wait showed no progress through pending to active: %q", progress)
	}
	if !strings.Contains(out, created.ID) {
		t.Errorf("disable --wait printed %q", out)
	}

	out, _, err = w.ctl(nil, "jobs", "list", "--status", "failed")
	if err != nil || strings.Contains(out, created.ID) {
		t.Errorf("list --status failed shows the active job: %v\n%s", err, out)
	}
}

// delete --wait ends once the delete finished: the API answers 410 for
// the job, whose runs stay readable.
func TestDeleteWaitEndsAtGone(t *testing.T) {
	w := newWorld(t)
	out, _, err := w.ctl(nil, "jobs", "create", "-o", "json", "--webroot", w.webroot, "--schedule", "*/5 * * * *", "--command", "true")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var created apiclient.Job
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("create -o json printed %q (%v)", out, err)
	}
	go func() {
		time.Sleep(time.Second)
		w.finishDelete(created.ID)
	}()
	_, progress, err := w.ctl(nil, "jobs", "delete", created.ID, "--wait", "--wait-timeout", "30s")
	if err != nil || !strings.Contains(progress, "deleting") || !strings.Contains(progress, created.ID+": deleted") {
		t.Errorf("delete --wait: %v; progress %q, want deleting then deleted", err, progress)
	}
}

func TestErrorsAreTheAPIs(t *testing.T) {
	w := newWorld(t)
	_, _, err := w.ctl(nil, "jobs", "create", "--webroot", w.webroot, "--schedule", "61 * * * *", "--command", "true")
	if err == nil || !strings.Contains(err.Error(), "schedule") || !strings.Contains(err.Error(), "400") {
		t.Errorf("bad schedule: %v, want the API's 400 naming the schedule", err)
	}
	if _, _, err := w.ctl(map[string]string{"HOSTCRON_API_KEY": "wrong"}, "jobs", "list"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong key: %v, want 401", err)
	}
	if _, _, err := w.ctl(map[string]string{"HOSTCRON_API": ""}, "jobs", "list"); err == nil || !strings.Contains(err.Error(), "no API address") {
		t.Errorf("no API: %v", err)
	}
	if _, _, err := w.ctl(nil, "jobs", "list", "-o", "yaml"); err == nil {
		t.Error("-o yaml accepted")
	}
	if _, _, err := w.ctl(nil, "jobs", "update", "00000000-0000-0000-0000-000000000000"); err == nil || !strings.Contains(err.Error(), "nothing to change") {
		t.Errorf("update without fields: %v", err)
	}
}

func TestPreviewAndKeys(t *testing.T) {
	w := newWorld(t)
	out, _, err := w.ctl(nil, "preview", "30 4 * * *", "--count", "2")
	if err != nil || strings.Count(out, "next") != 2 || !strings.Contains(out, "OnCalendar") || !strings.Contains(out, "At 04:30") {
		t.Errorf("preview: %v\n%s", err, out)
	}
	// A time the spring-forward night skips is named, with its date.
	out, _, err = w.ctl(nil, "preview", "30 2 * * *", "--timezone", "Europe/Berlin")
	if err != nil || !strings.Contains(out, "dst_gap") || !strings.Contains(out, "dst_repeat") {
		t.Errorf("preview in Europe/Berlin: %v\n%s", err, out)
	}
	admin := map[string]string{"HOSTCRON_API_KEY": adminKey}
	out, _, err = w.ctl(admin, "keys", "create", "--for-tenant", w.tenant, "--name", "status page", "--read-only", "-o", "json")
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	var k struct {
		ID, Key string
	}
	_ = json.Unmarshal([]byte(out), &k)
	out, _, err = w.ctl(admin, "keys", "list", "--for-tenant", w.tenant)
	if err != nil || !strings.Contains(out, "status page") || strings.Contains(out, k.Key) {
		t.Errorf("keys list (no secrets): %v\n%s", err, out)
	}
	out, _, err = w.ctl(admin, "keys", "rotate", k.ID, "--grace", "1h")
	if err != nil || !strings.Contains(out, "shown once") {
		t.Errorf("rotate: %v\n%s", err, out)
	}
	out, _, _ = w.ctl(admin, "keys", "list", "--for-tenant", w.tenant)
	if !strings.Contains(out, "active until") {
		t.Errorf("the rotated key does not show its grace:\n%s", out)
	}
	// The read-only key reads but cannot change.
	ro := map[string]string{"HOSTCRON_API_KEY": k.Key}
	if _, _, err := w.ctl(ro, "jobs", "list"); err != nil {
		t.Errorf("read-only key listing: %v", err)
	}
	if _, _, err := w.ctl(ro, "jobs", "create", "--webroot", w.webroot, "--schedule", "* * * * *", "--command", "true"); err == nil || !strings.Contains(err.Error(), "read_only") {
		t.Errorf("read-only key creating: %v", err)
	}
}

func TestSettingsPrecedence(t *testing.T) {
	env := map[string]string{"HOSTCRON_API": "http://env", "HOSTCRON_API_KEY": "envkey"}
	file := fileConfig{API: "http://file", Key: "filekey", Tenant: "filetenant"}
	for _, c := range []struct {
		name  string
		flags settings
		env   map[string]string
		want  settings
	}{
		{"file only", settings{}, nil, settings{"http://file", "filekey", "filetenant"}},
		{"env over file", settings{}, env, settings{"http://env", "envkey", "filetenant"}},
		{"flag over env", settings{API: "http://flag"}, env, settings{"http://flag", "envkey", "filetenant"}},
	} {
		if got := resolve(c.flags, func(k string) string { return c.env[k] }, file); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if _, err := readConfig("/nonexistent/ctl.json", true); err == nil {
		t.Error("a named config file that is missing is no error")
	}
	if _, err := readConfig("/nonexistent/ctl.json", false); err != nil {
		t.Errorf("the default config file missing: %v", err)
	}
}

func TestKeyNeverLeavesForAnotherHost(t *testing.T) {
	leaked := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked <- r.Header.Get("X-API-Key")
	}))
	defer other.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	w := &world{t: t, url: redirector.URL, key: "hc_secret", tenant: "00000000-0000-0000-0000-000000000001"}
	if _, _, err := w.ctl(nil, "jobs", "list"); err == nil || !strings.Contains(err.Error(), "redirected") {
		t.Errorf("a redirect was followed or not reported: %v", err)
	}
	select {
	case k := <-leaked:
		t.Errorf("the other host got a request (key %q)", k)
	default:
	}
	for base, ok := range map[string]bool{
		"https://cron.example.net": true, "http://127.0.0.1:8080": true, "http://localhost:8080": true, "http://[::1]:8080": true,
		"http://cron.example.net": false, "http://10.0.0.5": false, "ftp://x": false, "cron.example.net": false,
	} {
		if err := apiclient.CheckBaseURL(base); (err == nil) != ok {
			t.Errorf("CheckBaseURL(%q) = %v, want ok=%v", base, err, ok)
		}
	}
}

func TestTenantTextCannotDriveTheTerminal(t *testing.T) {
	for in, want := range map[string]string{
		"plain output":              "plain output",
		"a\tb\nc":                   "a b⏎c",
		"\x1b[2J\x1b]52;c;aGk=\x07": `\u001b[2J\u001b]52;c;aGk=\u0007`,
		"evil\u202egnp.exe":         `evil\u202egnp.exe`,
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCancelThroughTheCommandLine(t *testing.T) {
	w := newWorld(t)
	out, _, err := w.ctl(nil, "jobs", "create", "-o", "json", "--webroot", w.webroot, "--schedule", "* * * * *", "--command", "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	var j apiclient.Job
	_ = json.Unmarshal([]byte(out), &j)
	w.setJobStatus(j.ID)
	out, _, err = w.ctl(nil, "jobs", "run-now", j.ID, "-o", "json")
	if err != nil {
		t.Fatalf("run-now: %v", err)
	}
	var acc struct {
		RunKey string `json:"run_key"`
	}
	if err := json.Unmarshal([]byte(out), &acc); err != nil || acc.RunKey == "" {
		t.Fatalf("run-now printed %q (%v)", out, err)
	}
	out, _, err = w.ctl(nil, "jobs", "cancel", j.ID, acc.RunKey)
	if err != nil || !strings.Contains(out, "cancel_requested") || !strings.Contains(out, acc.RunKey) {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	future := j.ID + "#scheduled#" + time.Now().UTC().Add(time.Hour).Truncate(time.Minute).Format(time.RFC3339)
	if _, _, err := w.ctl(nil, "jobs", "cancel", j.ID, future); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("cancel of a future slot: %v, want the API's 409", err)
	}
}

func TestSlotsThroughTheCommandLine(t *testing.T) {
	w := newWorld(t)
	out, _, err := w.ctl(nil, "jobs", "create", "-o", "json", "--webroot", w.webroot, "--schedule", "0 * * * *", "--command", "true")
	if err != nil {
		t.Fatal(err)
	}
	var j apiclient.Job
	_ = json.Unmarshal([]byte(out), &j)
	w.setJobStatus(j.ID)
	// A past the API cannot make: created and provisioned before base.
	base := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	w.sql(`UPDATE cron_jobs SET created_at = $2, swept_until = $3 WHERE id = $1`, j.ID, base.Add(-time.Hour), base.Add(time.Hour))
	w.sql(`UPDATE cron_job_events SET at = $2 WHERE cron_job_id = $1`, j.ID, base.Add(-time.Hour))
	for slot, result := range map[time.Time]string{base: "exit_code", base.Add(time.Hour): "lost"} {
		w.sql(`INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, exit_code)
			VALUES ($1, $2, 1, $3, $4, CASE WHEN $4 = 'exit_code' THEN 7 END)`,
			j.ID+"#scheduled#"+slot.Format(time.RFC3339), j.ID, slot, result)
	}
	from, to := base.Format(time.RFC3339), base.Add(3*time.Hour).Format(time.RFC3339)
	out, _, err = w.ctl(nil, "slots", j.ID, "--from", from, "--to", to)
	if err != nil {
		t.Fatalf("slots: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"SLOT", "WALL TIME", "STATE", "RESULT", "EXIT"},
		{from, base.Format("2006-01-02T15:04:05"), "ran", "exit_code", "7"},
		{base.Add(time.Hour).Format(time.RFC3339), "lost", "lost", "-"},
		{base.Add(2 * time.Hour).Format(time.RFC3339), "not_swept_yet", "-", "-"},
	}
	if len(lines) != len(want) {
		t.Fatalf("slots printed %d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, cells := range want {
		if !containsInOrder(lines[i], cells) {
			t.Errorf("line %d = %q, want the cells %q", i, lines[i], cells)
		}
	}

	out, _, err = w.ctl(nil, "slots", j.ID, "--from", from, "--to", to, "-o", "json")
	var answer struct {
		Slots []apiclient.Slot `json:"slots"`
	}
	if err != nil || json.Unmarshal([]byte(out), &answer) != nil || len(answer.Slots) != 3 || answer.Slots[0].Run == nil {
		t.Errorf("slots -o json: %v\n%s", err, out)
	}
	if _, _, err := w.ctl(nil, "slots", j.ID, "--from", "2026-01-01T00:00:00Z", "--to", "2026-03-01T00:00:00Z"); err == nil ||
		!strings.Contains(err.Error(), "31 days") {
		t.Errorf("a 59-day range: %v, want the API's 400 naming the limit", err)
	}
}

// containsInOrder reports whether line holds the cells in order.
func containsInOrder(line string, cells []string) bool {
	for _, c := range cells {
		i := strings.Index(line, c)
		if i < 0 {
			return false
		}
		line = line[i+len(c):]
	}
	return true
}
