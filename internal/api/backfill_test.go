package api

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

// A backfill (run-now with a slot) takes only a past fire time of the
// job's schedule since its creation and within wire.MaxBackfillAge; any
// other slot is a 400 naming slot that queues nothing.
func TestBackfillValidation(t *testing.T) {
	v := newEnv(t)
	id := v.createJob(`,"schedule":"0 * * * *"`)["id"].(string)
	v.activate(id)
	v.sql(`UPDATE cron_jobs SET created_at = now() - interval '3 days' WHERE id = $1`, id)
	hour := time.Now().UTC().Truncate(time.Hour)
	before := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1`, id)
	for name, body := range map[string]string{
		"future":           `{"slot":"` + hour.Add(time.Hour).Format(time.RFC3339) + `"}`,
		"not a fire time":  `{"slot":"` + hour.Add(-time.Hour+time.Minute).Format(time.RFC3339) + `"}`,
		"before creation":  `{"slot":"` + hour.Add(-4*24*time.Hour).Format(time.RFC3339) + `"}`,
		"not RFC 3339":     `{"slot":"yesterday"}`,
		"not a string":     `{"slot":12}`,
		"unknown field":    `{"slot":"` + hour.Format(time.RFC3339) + `","attempt":2}`,
		"seconds fraction": `{"slot":"` + hour.Add(-time.Hour+time.Second/2).Format(time.RFC3339Nano) + `"}`,
	} {
		code, out := v.do("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, body)
		var e struct {
			Error struct{ Field string } `json:"error"`
		}
		_ = json.Unmarshal(out, &e)
		want := "slot"
		if name == "unknown field" {
			want = "attempt"
		}
		if code != 400 || e.Error.Field != want {
			t.Errorf("%s: %d %s, want 400 naming %s", name, code, out, want)
		}
	}
	// Older than MaxBackfillAge, though after the job's creation.
	v.sql(`UPDATE cron_jobs SET created_at = now() - interval '30 days' WHERE id = $1`, id)
	if code, out := v.do("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, `{"slot":"`+hour.Add(-8*24*time.Hour).Format(time.RFC3339)+`"}`); code != 400 || !strings.Contains(string(out), `"slot"`) {
		t.Errorf("slot 8 days old: %d %s", code, out)
	}
	if after := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1`, id); after != before {
		t.Errorf("refused backfills queued %d tasks", after-before)
	}
}

// A valid backfill answers 202 with its key and Location; the run is
// queued as a backfill until a node reports it, then recorded with
// trigger backfill and the slot as scheduled_at. It is not the slot's
// scheduled run: the slots view does not take it, and the slot can be
// backfilled again under another key.
func TestBackfillRunsThePastSlot(t *testing.T) {
	v := newEnv(t)
	id := v.slotsJob("0 * * * *", "UTC", time.Now().Add(-3*24*time.Hour))
	v.activate(id)
	slot := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	body := `{"slot":"` + slot.Format(time.RFC3339) + `"}`
	code, hdr, out := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, body, nil)
	if code != 202 {
		t.Fatalf("backfill: %d %s", code, out)
	}
	var acc struct {
		RunKey string `json:"run_key"`
	}
	_ = json.Unmarshal(out, &acc)
	k, err := runkey.Parse(acc.RunKey)
	if err != nil || k.Trigger != "backfill" || !k.Slot.Equal(slot) || k.JobID != id {
		t.Fatalf("run_key %q: %+v %v", acc.RunKey, k, err)
	}
	if loc := hdr.Get("Location"); loc != "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(acc.RunKey) {
		t.Errorf("Location %q", loc)
	}
	if n := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = 'run_now' AND run_key = $2`, id, acc.RunKey); n != 1 {
		t.Errorf("%d tasks carry the backfill's key", n)
	}
	q := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(acc.RunKey), v.key, "", 200)
	if q["result"] != "queued" || q["trigger"] != "backfill" {
		t.Errorf("queued backfill: %v", q)
	}
	// The same request under another slot is not a request of this job.
	other := runkey.Backfill(id, slot.Add(-time.Hour), k.Request)
	if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(other), v.key, ""); code != 404 {
		t.Errorf("a backfill key with another slot: %d, want 404", code)
	}
	post := func(key string, at time.Time) (int, string) {
		b, _ := json.Marshal(map[string]any{"run_key": key, "version": 1, "scheduled_at": at,
			"started_at": time.Now().UTC().Add(-time.Second), "finished_at": time.Now().UTC(), "result": "success"})
		code, out := v.do("POST", "/internal/v1/cron-jobs/"+id+"/outcome", v.node, string(b))
		return code, string(out)
	}
	if code, out := post(acc.RunKey, slot.Add(time.Hour)); code != 400 || !strings.Contains(out, "scheduled_at") {
		t.Errorf("backfill outcome with another slot: %d %s", code, out)
	}
	if code, out := post(acc.RunKey, slot); code != 200 {
		t.Fatalf("backfill outcome: %d %s", code, out)
	}
	run := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs/"+url.PathEscape(acc.RunKey), v.key, "", 200)
	if run["trigger"] != "backfill" || run["result"] != "success" || run["scheduled_at"] != slot.Format(time.RFC3339) {
		t.Errorf("recorded backfill: %v", run)
	}
	listed := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/runs?trigger=backfill", v.key, "", 200)
	if keys := runKeys(listed); len(keys) != 1 || keys[0] != acc.RunKey {
		t.Errorf("runs?trigger=backfill: %v", keys)
	}
	_, sl, raw := v.slots(id, "?from="+slot.Format(time.RFC3339)+"&to="+slot.Add(time.Minute).Format(time.RFC3339), v.key)
	if len(sl.Slots) != 1 || sl.Slots[0].Run != nil || sl.Slots[0].OffSchedule {
		t.Errorf("the slots view took the backfill as the slot's run: %s", raw)
	}
	// Backfilled again after another fix: a second key, a second run.
	again := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, body, 202)["run_key"].(string)
	if again == acc.RunKey {
		t.Errorf("a second backfill of the slot has the first one's key %q", again)
	}
	// A plain run-now still takes no body.
	if rn := v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/run-now", v.key, "{}", 202)["run_key"].(string); !strings.Contains(rn, "#manual#") {
		t.Errorf("run-now with {}: %q", rn)
	}
}
