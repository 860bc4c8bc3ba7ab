package api

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestJobEventsRecordWhoDidWhat(t *testing.T) {
	v := newEnv(t)
	k, err := v.store.APIKeyByToken(context.Background(), v.key)
	if err != nil {
		t.Fatal(err)
	}
	tenantActor := "key:" + k.ID
	job := v.createJob(`,"max_failures":2`)
	id := job["id"].(string)
	v.activate(id)
	v.mustJSON("PUT", "/api/v1/cron-jobs/"+id, v.key, `{"command":"php artisan schedule:run -v"}`, 200)
	v.activate(id)
	// A change refused (stale If-Match) leaves no trace.
	if code, _, _ := v.doHeaders("POST", "/api/v1/cron-jobs/"+id+"/disable", v.key, "", map[string]string{"If-Match": "1"}); code != 412 {
		t.Fatalf("stale disable = %d", code)
	}
	// Two failures in a row: the system disables it.
	slot := time.Now().Truncate(time.Minute).Add(-10 * time.Minute)
	for i := 0; i < 2; i++ {
		if code, out := v.outcome(id, slot.Add(time.Duration(i)*5*time.Minute), 2, "exit_code"); code != 200 {
			t.Fatalf("outcome: %d %v", code, out)
		}
	}
	v.mustJSON("POST", "/api/v1/cron-jobs/"+id+"/enable", adminKey, "", 202)

	got := v.mustJSON("GET", "/api/v1/cron-jobs/"+id+"/events", v.key, "", 200)["events"].([]any)
	var trail []string
	for _, e := range got {
		m := e.(map[string]any)
		trail = append(trail, fmt.Sprintf("%s by %s", m["action"], m["actor"]))
		if m["action"] == "update" {
			if f := m["detail"].(map[string]any)["fields"].([]any); len(f) != 1 || f[0] != "command" {
				t.Errorf("update event names fields %v, want [command]", f)
			}
		}
	}
	want := []string{
		"enable by admin", "auto_disable by system", "provisioned by system", "update by " + tenantActor,
		"provisioned by system", "create by " + tenantActor,
	}
	if fmt.Sprint(trail) != fmt.Sprint(want) {
		t.Errorf("trail, newest first:\n got %v\nwant %v", trail, want)
	}

	// Paging: two at a time, no event twice, none left out.
	var paged []string
	path := "/api/v1/cron-jobs/" + id + "/events?limit=2"
	for page := 0; page < 10; page++ {
		resp := v.mustJSON("GET", path, v.key, "", 200)
		for _, e := range resp["events"].([]any) {
			paged = append(paged, fmt.Sprint(e.(map[string]any)["id"]))
		}
		next, ok := resp["next_before"]
		if !ok {
			break
		}
		path = fmt.Sprintf("/api/v1/cron-jobs/%s/events?limit=2&before=%d", id, int64(next.(float64)))
	}
	if len(paged) != len(want) {
		t.Errorf("paged through %d events, want %d: %v", len(paged), len(want), paged)
	}

	// Another tenant cannot read the trail.
	_, _, otherKey := v.addTenant("globex", v.shardID)
	if code, _ := v.do("GET", "/api/v1/cron-jobs/"+id+"/events", otherKey, ""); code != 404 {
		t.Errorf("another tenant reading the trail = %d, want 404", code)
	}
}
