//go:build e2e

package flow

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRetriesThroughTheAPI: a job whose command fails twice and then
// succeeds, with retries=3: its first slot shows attempts 1 (scheduled),
// 2 and 3 (retry), all of the same slot, each run once across the shard
// (the command's own witness on shared storage has one line per key),
// and the job ends with no consecutive failure (max_failures 2 would have
// disabled it had the failed attempts counted).
func TestRetriesThroughTheAPI(t *testing.T) {
	const witness, counter = "retries-witness", "retries-count"
	dir := filepath.Join(c.Shared, "www", "acme", "public")
	_ = os.Remove(filepath.Join(dir, witness))
	_ = os.Remove(filepath.Join(dir, counter))
	cmd := fmt.Sprintf(`n=$(($(cat %[2]s 2>/dev/null || echo 0)+1)); echo $n > %[2]s; `+
		`echo "$(hostname) $HOSTCRON_RUN_KEY $HOSTCRON_SLOT $HOSTCRON_TRIGGER $HOSTCRON_ATTEMPT" >> %[1]s; [ $n -ge 3 ]`, witness, counter)
	body := fmt.Sprintf(`{"webroot_id":%q,"schedule":"*/2 * * * *","command":%q,"retries":3,"retry_delay_seconds":1,"max_failures":2}`,
		c.Webroots["acme"].ID, cmd)
	id := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", body, 201)["id"].(string)
	waitStatus(t, id, "active", 60*time.Second)
	defer func() {
		call(t, "DELETE", "/api/v1/cron-jobs/"+id, "", 202)
		waitGone(t, id, 60*time.Second)
	}()

	// The first slot's three attempts, oldest first.
	var attempts []map[string]any
	deadline := time.Now().Add(5 * time.Minute)
	for {
		attempts = firstSlotRuns(t, id)
		if len(attempts) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(attempts) != 3 {
		t.Fatalf("first slot's runs: %v, want 3 attempts", attempts)
	}
	slot := attempts[0]["scheduled_at"]
	for i, want := range []struct {
		trigger, result string
	}{{"scheduled", "exit_code"}, {"retry", "exit_code"}, {"retry", "success"}} {
		r := attempts[i]
		if r["attempt"] != float64(i+1) || r["trigger"] != want.trigger || r["result"] != want.result || r["scheduled_at"] != slot {
			t.Errorf("attempt %d: %v, want trigger %s, result %s, slot %v", i+1, r, want.trigger, want.result, slot)
		}
	}
	// One run per attempt across the shard: each key once in the witness,
	// with the slot, trigger and attempt the command saw.
	b, err := os.ReadFile(filepath.Join(dir, witness))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 5 && f[2] == slot {
			seen[f[1]+" "+f[3]+" "+f[4]]++
		}
	}
	for i, r := range attempts {
		k := fmt.Sprintf("%s %s %d", r["run_key"], r["trigger"], i+1)
		if seen[k] != 1 {
			t.Errorf("attempt %d ran %d times (witness %q)", i+1, seen[k], b)
		}
	}
	if len(seen) != 3 {
		t.Errorf("the slot ran %d keys, want 3: %v", len(seen), seen)
	}
	j := call(t, "GET", "/api/v1/cron-jobs/"+id, "", 200)
	if j["consecutive_failures"] != 0.0 || j["status"] != "active" || j["last_result"] != "success" {
		t.Errorf("job after the retried slot: status %v, %v failures, last result %v", j["status"], j["consecutive_failures"], j["last_result"])
	}
}

// firstSlotRuns are the recorded runs of the job's oldest slot, by attempt.
func firstSlotRuns(t *testing.T, id string) []map[string]any {
	t.Helper()
	var all []map[string]any
	for _, r := range recordedRuns(t, id) {
		all = append(all, r.(map[string]any))
	}
	if len(all) == 0 {
		return nil
	}
	sort.Slice(all, func(a, b int) bool {
		if all[a]["scheduled_at"] != all[b]["scheduled_at"] {
			return all[a]["scheduled_at"].(string) < all[b]["scheduled_at"].(string)
		}
		return all[a]["attempt"].(float64) < all[b]["attempt"].(float64)
	})
	var out []map[string]any
	for _, r := range all {
		if r["scheduled_at"] == all[0]["scheduled_at"] {
			out = append(out, r)
		}
	}
	return out
}
