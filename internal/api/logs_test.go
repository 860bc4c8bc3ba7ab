package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/logship"
)

// fakeLoki records the LogQL it is asked and answers one line.
type fakeLoki struct {
	mu      sync.Mutex
	queries []string
}

func (f *fakeLoki) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.queries = append(f.queries, r.URL.Query().Get("query"))
	f.mu.Unlock()
	_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"streams","result":[
		{"stream":{"node":"node1","cron_job_id":"j","tenant_id":"acme"},"values":[["1763700000000000000","hello"]]}]}}`))
}

func (f *fakeLoki) last() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		return ""
	}
	return f.queries[len(f.queries)-1]
}

func TestTenantLogs(t *testing.T) {
	loki := &fakeLoki{}
	srv := httptest.NewServer(loki)
	defer srv.Close()
	v := newEnvWith(t, Config{Logs: &logship.Client{URL: srv.URL}})
	id := v.createJob("")["id"].(string)
	otherTenant, otherWebroot, otherKey := v.addTenant("globex", v.shardID)
	otherJob := v.mustJSON("POST", "/api/v1/tenants/"+otherTenant+"/cron-jobs", otherKey,
		`{"webroot_id":"`+otherWebroot+`","schedule":"* * * * *","command":"true"}`, 201)["id"].(string)
	base := "/api/v1/tenants/" + v.tenant + "/logs"

	out := v.mustJSON("GET", base+"?log_type=cron&cron_job_id="+id+"&since=15m&limit=10", v.key, "", 200)
	if lines := out["lines"].([]any); len(lines) != 1 || lines[0].(map[string]any)["node"] != "node1" {
		t.Errorf("lines: %v", out)
	}
	if q := loki.last(); q != `{log_type="cron", tenant_id="acme"} | cron_job_id="`+id+`"` {
		t.Errorf("query %s", q)
	}
	v.mustJSON("GET", base, v.key, "", 200)
	if q := loki.last(); q != `{log_type="cron", tenant_id="acme"}` {
		t.Errorf("query %s", q)
	}

	// Injection attempts through every parameter: rejected, or quoted so
	// that the tenant selector stays and the attempt is a plain substring.
	asked := len(loki.queries)
	for _, bad := range []string{
		"cron_job_id=" + url.QueryEscape(`x"} or {tenant_id=~".+`),
		"cron_job_id=" + url.QueryEscape(`.*`),
		"log_type=" + url.QueryEscape(`cron"}|~".*`),
		"since=" + url.QueryEscape(`1h"}`), "since=-5m", "since=10000h", "limit=0", "limit=" + url.QueryEscape(`1|x`),
		"contains=" + url.QueryEscape("a\nb"),
	} {
		if code, out := v.do("GET", base+"?"+bad, v.key, ""); code != 400 {
			t.Errorf("%s: %d %s, want 400", bad, code, out)
		}
	}
	if len(loki.queries) != asked {
		t.Error("a rejected request reached Loki")
	}
	for _, attempt := range []string{`"} or {tenant_id=~".+"}`, "`} |~ `.*", `\"}|{`, `.*[a-z]+|()`} {
		v.mustJSON("GET", base+"?contains="+url.QueryEscape(attempt), v.key, "", 200)
		q := loki.last()
		prefix := `{log_type="cron", tenant_id="acme"} |= `
		if !strings.HasPrefix(q, prefix) {
			t.Errorf("contains %q: query %s lost its tenant selector", attempt, q)
			continue
		}
		if lit, err := strconv.Unquote(strings.TrimPrefix(q, prefix)); err != nil || lit != attempt {
			t.Errorf("contains %q: line filter %s is not one literal of the input", attempt, strings.TrimPrefix(q, prefix))
		}
	}
	// Another tenant's job or tenant: 404, and nothing asked of Loki.
	asked = len(loki.queries)
	for _, path := range []string{base + "?cron_job_id=" + otherJob, "/api/v1/tenants/" + otherTenant + "/logs"} {
		if code, _ := v.do("GET", path, v.key, ""); code != 404 {
			t.Errorf("%s: %d, want 404", path, code)
		}
	}
	if len(loki.queries) != asked {
		t.Error("a request for another tenant reached Loki")
	}
	var body map[string]any
	_, raw := v.do("GET", base+"?log_type=syslog", v.key, "")
	_ = json.Unmarshal(raw, &body)
	if body["error"].(map[string]any)["field"] != "log_type" {
		t.Errorf("log_type=syslog: %s", raw)
	}
}

// TestRunLogsAndUsage: a node's report carries what the command used and
// its invocation; the run shows both, with a warning near the memory
// limit; the logs API's run= selects exactly that invocation's lines over
// the run's own time, for the run's tenant only. A report with a bad
// invocation id is refused, and a run without one answers 409.
func TestRunLogsAndUsage(t *testing.T) {
	loki := &fakeLoki{}
	srv := httptest.NewServer(loki)
	defer srv.Close()
	v := newEnvWith(t, Config{Logs: &logship.Client{URL: srv.URL}})
	id := v.createJob(`,"max_memory_mb":64`)["id"].(string)
	v.activate(id)
	at := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)
	const inv = "0123456789abcdef0123456789abcdef"
	report := func(request, invocation string) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"run_key": id + "#manual#" + request, "version": 1, "scheduled_at": at,
			"started_at": at, "finished_at": at.Add(2 * time.Second), "result": "success",
			"cpu_seconds": 1.25, "peak_memory_bytes": 60 << 20, "invocation_id": invocation})
		return v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, string(body))
	}
	if code, out := report("1", `x"} or {a="b`); code != 400 || !strings.Contains(string(out), "invocation_id") {
		t.Fatalf("a report with a bad invocation id: %d %s, want 400", code, out)
	}
	if code, out := report("1", inv); code != 200 {
		t.Fatalf("report: %d %s", code, out)
	}
	key := id + "#manual#1"
	r := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key), v.key, "", 200)
	warnings, _ := r["warnings"].([]any)
	if r["cpu_seconds"] != 1.25 || r["peak_memory_bytes"] != float64(60<<20) || r["invocation_id"] != inv || len(warnings) != 1 ||
		!strings.Contains(warnings[0].(string), "peak memory 60 MiB of its 64 MiB limit") {
		t.Fatalf("run %v", r)
	}

	base := "/api/v1/tenants/" + v.tenant + "/logs"
	out := v.mustJSON("GET", base+"?run="+url.QueryEscape(key), v.key, "", 200)
	if q := loki.last(); q != `{log_type="cron", tenant_id="acme"} | cron_job_id="`+id+`" | invocation_id="`+inv+`"` {
		t.Errorf("run= query %s", q)
	}
	start, _ := time.Parse(time.RFC3339Nano, out["start"].(string))
	end, _ := time.Parse(time.RFC3339Nano, out["end"].(string))
	if !start.Equal(at.Add(-time.Minute)) || !end.Equal(at.Add(2*time.Second+5*time.Minute)) {
		t.Errorf("window %v – %v, want the run's own time with slack", start, end)
	}

	otherTenant, _, otherKey := v.addTenant("globex", v.shardID)
	asked := len(loki.queries)
	if code, out := v.do("GET", "/api/v1/tenants/"+otherTenant+"/logs?run="+url.QueryEscape(key), otherKey, ""); code != 404 {
		t.Errorf("another tenant's run= of this run: %d %s, want 404", code, out)
	}
	if code, _ := v.do("GET", base+"?run=nonsense", v.key, ""); code != 400 {
		t.Errorf("run=nonsense: %d, want 400", code)
	}
	if code, out := report("2", ""); code != 200 {
		t.Fatalf("report without invocation: %d %s", code, out)
	}
	if code, out := v.do("GET", base+"?run="+url.QueryEscape(id+"#manual#2"), v.key, ""); code != 409 {
		t.Errorf("run= of a run without invocation: %d %s, want 409", code, out)
	}
	if len(loki.queries) != asked {
		t.Error("a refused run= reached Loki")
	}
}

// TestRunLogsOfRunInProgress: run= of a run a node reported started and
// nothing has recorded yet selects its invocation from the start report,
// from its start up to now; another tenant still gets 404, and once the
// run is recorded the window ends with it.
func TestRunLogsOfRunInProgress(t *testing.T) {
	loki := &fakeLoki{}
	srv := httptest.NewServer(loki)
	defer srv.Close()
	v := newEnvWith(t, Config{Logs: &logship.Client{URL: srv.URL}})
	id := v.createJob("")["id"].(string)
	v.activate(id)
	_, _, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "", nil)
	var acc map[string]any
	_ = json.Unmarshal(out, &acc)
	key := acc["run_key"].(string)
	base := "/api/v1/tenants/" + v.tenant + "/logs?run=" + url.QueryEscape(key)
	if code, out := v.do("GET", base, v.key, ""); code != 404 {
		t.Fatalf("run= of a queued run nobody started: %d %s, want 404", code, out)
	}
	at := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	const inv = "fedcba9876543210fedcba9876543210"
	b, _ := json.Marshal(map[string]any{"run_key": key, "version": 1, "scheduled_at": at, "started_at": at, "invocation_id": inv})
	if code, out := v.do("POST", "/internal/v1/cron-jobs/"+id+"/started", v.node, string(b)); code != 200 {
		t.Fatalf("start: %d %s", code, out)
	}
	before := time.Now()
	got := v.mustJSON("GET", base, v.key, "", 200)
	if q := loki.last(); q != `{log_type="cron", tenant_id="acme"} | cron_job_id="`+id+`" | invocation_id="`+inv+`"` {
		t.Errorf("run= query of a run in progress %s", q)
	}
	start, _ := time.Parse(time.RFC3339Nano, got["start"].(string))
	end, _ := time.Parse(time.RFC3339Nano, got["end"].(string))
	if !start.Equal(at.Add(-runLogLead)) || end.Before(before.Add(-time.Second)) {
		t.Errorf("window %v – %v, want from its start (with lead) up to now", start, end)
	}
	otherTenant, _, otherKey := v.addTenant("globex", v.shardID)
	if code, out := v.do("GET", "/api/v1/tenants/"+otherTenant+"/logs?run="+url.QueryEscape(key), otherKey, ""); code != 404 {
		t.Errorf("another tenant's run= of a run in progress: %d %s, want 404", code, out)
	}
}
