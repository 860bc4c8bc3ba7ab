package api

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestRunOutputTail: a node's report carries the end of the run's output;
// GET run shows it, the listing leaves it out but keeps the cut counts, a
// redelivery changes nothing, a report of an older node (no tail) reads
// null, and a tail the hook could not have made is a 400.
func TestRunOutputTail(t *testing.T) {
	v := newEnv(t)
	id := v.createJob("")["id"].(string)
	v.activate(id)
	at := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Second)
	report := func(request string, extra map[string]any) (int, []byte) {
		body := map[string]any{"run_key": id + "#manual#" + request, "version": 1, "scheduled_at": at,
			"started_at": at, "finished_at": at.Add(2 * time.Second), "result": "exit_code", "exit_code": 1}
		for k, val := range extra {
			body[k] = val
		}
		b, _ := json.Marshal(body)
		return v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, string(b))
	}
	for name, bad := range map[string]map[string]any{
		"over 4 KiB":       {"output_tail": strings.Repeat("x", 4097)},
		"NUL":              {"output_tail": "a\x00b"},
		"negative dropped": {"output_tail": "ok", "output_dropped_bytes": -1},
	} {
		if code, out := report("1", bad); code != 400 || !strings.Contains(string(out), "output_") {
			t.Errorf("%s: %d %s, want 400 naming the field", name, code, out)
		}
	}
	const tail = "connecting…\nPHP Fatal error: Allowed memory size exhausted\n"
	if code, out := report("1", map[string]any{"output_tail": tail, "output_dropped_bytes": 512}); code != 200 {
		t.Fatalf("report: %d %s", code, out)
	}
	if code, out := report("1", map[string]any{"output_tail": "another tail"}); code != 200 || !strings.Contains(string(out), `"duplicate":true`) {
		t.Fatalf("redelivery: %d %s", code, out)
	}
	key := id + "#manual#1"
	r := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(key), v.key, "", 200)
	if r["output_tail"] != tail || r["output_truncated"] != true || r["output_dropped_bytes"] != float64(512) {
		t.Errorf("run %v: want the first report's tail, truncated, 512 bytes dropped", r)
	}
	list := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs", v.key, "", 200)
	runs := list["runs"].([]any)
	if len(runs) != 1 {
		t.Fatalf("listing %v", list)
	}
	if item := runs[0].(map[string]any); item["output_truncated"] != true {
		t.Errorf("listing item %v: want output_truncated", item)
	} else if _, has := item["output_tail"]; has {
		t.Errorf("listing item carries output_tail: %v", item)
	}

	// The largest report a hook sends still fits the body limit: every
	// byte of the tail and the reason is one JSON escapes to six.
	worst := map[string]any{"output_tail": strings.Repeat("\x01", 4096), "failure_reason": strings.Repeat("\x01", 2048)}
	if code, out := report("3", worst); code != 200 {
		t.Errorf("the largest report: %d %s, want it accepted", code, out)
	}

	if code, out := report("2", nil); code != 200 { // an older node
		t.Fatalf("report without output: %d %s", code, out)
	}
	r = v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(id+"#manual#2"), v.key, "", 200)
	if tail, has := r["output_tail"]; !has || tail != nil || r["output_truncated"] != false {
		t.Errorf("run of an older node %v: want output_tail null, not truncated", r)
	}
}
