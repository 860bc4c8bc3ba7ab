package api

import (
	"strings"
	"testing"
	"time"
)

// previewNow is before both of 2026's clock changes in Europe/Berlin.
var previewNow = time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)

func newPreviewEnv(t *testing.T) *env {
	return newEnvWith(t, Config{Now: func() time.Time { return previewNow }})
}

// noteKinds lists a dst_notes or warnings array as "kind wall at" lines;
// at is in the zone's offset, as next_runs are, so a repeat shows which
// pass runs.
func noteKinds(t *testing.T, v any) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("notes %v (%T), want an array", v, v)
	}
	var out []string
	for _, n := range list {
		m := n.(map[string]any)
		at, _ := m["at"].(string)
		out = append(out, m["kind"].(string)+" "+m["wall"].(string)+" "+at)
	}
	return out
}

func TestPreviewExplanationAndDSTNotes(t *testing.T) {
	v := newPreviewEnv(t)
	for _, c := range []struct {
		query, explanation string
		notes              []string
	}{
		{"schedule=30+2+*+*+*&timezone=Europe/Berlin", "At 02:30 every day",
			[]string{"dst_gap 2026-03-29T02:30 ", "dst_repeat 2026-10-25T02:30 2026-10-25T02:30:00+02:00"}},
		{"schedule=30+2+*+*+*", "At 02:30 every day", nil},
		{"schedule=0+4+*+*+*&timezone=Europe/Berlin", "At 04:00 every day", nil},
		{"schedule=15+3+1+*+1&timezone=Europe/Berlin",
			"At 03:15, on day 1 of the month and on Monday (a day matches if EITHER the day of month OR the weekday matches)", nil},
		{"schedule=@hourly&timezone=America/New_York", "At minute 0 of every hour",
			[]string{"dst_gap 2026-03-08T02:00 ", "dst_repeat 2026-11-01T01:00 2026-11-01T01:00:00-04:00"}},
	} {
		p := v.mustJSON("GET", "/api/v1/cron-preview?"+c.query, v.key, "", 200)
		if p["explanation"] != c.explanation {
			t.Errorf("%s: explanation %q, want %q", c.query, p["explanation"], c.explanation)
		}
		if got := noteKinds(t, p["dst_notes"]); strings.Join(got, "|") != strings.Join(c.notes, "|") {
			t.Errorf("%s: dst_notes %q, want %q", c.query, got, c.notes)
		}
	}
}

func TestJobPreview(t *testing.T) {
	v := newPreviewEnv(t)
	job := v.createJob(`,"schedule":"30 2 * * 0","timezone":"Europe/Berlin","enabled":false`)
	id := job["id"].(string)
	p := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/preview?count=2", v.key, "", 200)
	if p["schedule"] != "30 2 * * 0" || p["timezone"] != "Europe/Berlin" || p["explanation"] != "At 02:30 on Sunday" {
		t.Errorf("job preview: %v", p)
	}
	if n := p["next_runs"].([]any); len(n) != 2 || n[0] != "2026-01-11T02:30:00+01:00" {
		t.Errorf("job preview next_runs: %v", n)
	}
	if got := noteKinds(t, p["dst_notes"]); len(got) != 2 {
		t.Errorf("job preview dst_notes: %v", got)
	}
	if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id+"/preview?count=0", v.key, ""); code != 400 {
		t.Errorf("job preview count=0 = %d, want 400", code)
	}
	// Another tenant's key sees no such job, as on every per-job route.
	_, _, otherKey := v.addTenant("globex", v.shardID)
	if code, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/preview", otherKey, ""); code != 404 {
		t.Errorf("another tenant's job preview = %d %s, want 404", code, out)
	}
	v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/preview", adminKey, "", 200)
}

func TestWriteAnswersCarryDSTWarnings(t *testing.T) {
	v := newPreviewEnv(t)
	berlin := v.createJob(`,"schedule":"30 2 * * *","timezone":"Europe/Berlin"`)
	if got := noteKinds(t, berlin["warnings"]); len(got) != 2 || got[0] != "dst_gap 2026-03-29T02:30 " {
		t.Errorf("create in Europe/Berlin: warnings %v", got)
	}
	utc := v.createJob(`,"schedule":"30 2 * * *"`)
	if got := noteKinds(t, utc["warnings"]); len(got) != 0 {
		t.Errorf("create in UTC: warnings %v, want []", got)
	}
	id := utc["id"].(string)
	up := v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"timezone":"America/New_York"}`, 200)
	if got := noteKinds(t, up["warnings"]); strings.Join(got, "|") != "dst_gap 2026-03-08T02:30 " {
		t.Errorf("update to America/New_York: warnings %v", got)
	}
	up = v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"schedule":"0 4 * * *"}`, 200)
	if got := noteKinds(t, up["warnings"]); len(got) != 0 {
		t.Errorf("update to 04:00: warnings %v, want []", got)
	}
	// Only writes warn: a read answers the job as before.
	if g := v.mustJSON("GET", "/api/v1/cron-jobs/"+id, v.key, "", 200); g["warnings"] != nil {
		t.Errorf("GET carries warnings: %v", g["warnings"])
	}
	// Validation errors are unchanged.
	if code, _ := v.do("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"timezone":"CET"}`); code != 400 {
		t.Errorf("update to CET = %d, want 400", code)
	}
}
