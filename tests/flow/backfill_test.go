//go:build e2e

package flow

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBackfillThroughTheAPI: run-now with a past slot re-runs that slot,
// once across the shard, with trigger backfill and HOSTCRON_SLOT the
// backfilled slot; the same slot backfilled again (after another fix) is
// a second run under a second key. Neither is the slot's scheduled run.
func TestBackfillThroughTheAPI(t *testing.T) {
	const witness = "backfill-witness"
	witnessPath := filepath.Join(c.Shared, "www", "acme", "public", witness)
	_ = os.Remove(witnessPath)
	body := fmt.Sprintf(`{"webroot_id":%q,"schedule":"0 * * * *","command":"echo \"$(hostname) $HOSTCRON_RUN_KEY $HOSTCRON_SLOT $HOSTCRON_TRIGGER $HOSTCRON_ATTEMPT\" >> %s"}`,
		c.Webroots["acme"].ID, witness)
	id := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", body, 201)["id"].(string)
	waitStatus(t, id, "active", 60*time.Second)
	// The API cannot backdate a job: it existed three hours ago.
	if _, err := c.Store.Pool().Exec(context.Background(), `UPDATE cron_jobs SET created_at = now() - interval '3 hours' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour).Format(time.RFC3339)
	call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", `{"slot":"`+time.Now().UTC().Add(time.Hour).Format(time.RFC3339)+`"}`, 400)

	var keys []string
	for i := range 2 {
		k := call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", `{"slot":"`+slot+`"}`, 202)["run_key"].(string)
		if !strings.Contains(k, "#backfill#"+slot+"#") {
			t.Fatalf("backfill %d: run_key %q", i+1, k)
		}
		r := waitRecorded(t, id, k, 90*time.Second)
		if r["result"] != "success" || r["trigger"] != "backfill" || r["scheduled_at"] != slot || r["attempt"] != 1.0 {
			t.Fatalf("backfill %d recorded %v", i+1, r)
		}
		keys = append(keys, k)
		lines := waitWitness(t, witnessPath, i+1, 10*time.Second)
		f := strings.Fields(lines[i])
		if len(f) != 5 || f[1] != k || f[2] != slot || f[3] != "backfill" || f[4] != "1" {
			t.Fatalf("the command saw %q, want key %s, slot %s, trigger backfill, attempt 1", lines[i], k, slot)
		}
	}
	if keys[0] == keys[1] {
		t.Fatalf("two backfills of one slot share the key %s", keys[0])
	}
	// Nothing more ran anywhere (a retried activity, another node).
	time.Sleep(3 * time.Second)
	waitWitness(t, witnessPath, 2, 0)
	if runs := recordedRuns(t, id); len(runs) != 2 {
		t.Errorf("%d runs recorded, want the 2 backfills", len(runs))
	}
	call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
	waitGone(t, id, 60*time.Second)
}
