//go:build e2e && bench

package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// burstOut is node-agent burst's output (cmd/node-agent/burst.go).
type burstOut struct {
	Changes     int      `json:"changes"`
	Concurrency int      `json:"concurrency"`
	Plans       int      `json:"plans"`
	Reloads     int      `json:"reloads"`
	ReloadMS    int64    `json:"reload_ms"`
	TookMS      int64    `json:"took_ms"`
	ReconcileMS int64    `json:"reconcile_ms"`
	Failed      []string `json:"failed"`
	VmHWMKB     int64    `json:"vm_hwm_kb"`
}

// TestApplyBurst (issue 16): on a node holding T cron timers, a burst of
// BENCH_BURST_CHANGES schedule changes (each a new version whose timer
// file changes: a reload and a restart each), sent the way the daemon's
// activities bring them (each queued at once, answered when its batch
// ends; or with each bound on the changes in flight of
// BENCH_BURST_SLOTS, a comma list, 0 for none: an A/B in one run),
// against the same changes one by one
// (BENCH_BURST_SERIAL of them, each its own plan and reload; scaled to
// the burst's size). The first batched run's process first converges the
// T timers, so its VmHWM is an agent's peak at T timers. T:
// BENCH_BURST_TIMERS, a comma list.
func TestApplyBurst(t *testing.T) {
	changes := envInt("BENCH_BURST_CHANGES", 1000)
	serial := envInt("BENCH_BURST_SERIAL", 50)
	sizes := strings.Split(envStr("BENCH_BURST_TIMERS", "1000,5000"), ",")
	var slotList []string // empty: the agent's own
	if v := envStr("BENCH_BURST_SLOTS", ""); v != "" {
		slotList = strings.Split(v, ",")
	}
	const node = "node3"
	for _, s := range sizes {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BENCH_BURST_TIMERS: %q", s)
		}
		set := jobs(n)
		writeNodeJSON(t, node, "/root/burst-set.json", set)
		k := min(changes, n)
		version := int64(1)
		var batched []burstOut
		for i := range max(1, len(slotList)) {
			version++
			args := []string{"burst"}
			if i == 0 {
				args = append(args, "--set", "/root/burst-set.json")
			}
			if len(slotList) > 0 {
				args = append(args, "--concurrency", slotList[i])
			}
			// A new schedule each run, so every change writes a timer file.
			var b burstOut
			c.Agent(t, node, withSchedule(set[:k], version, fmt.Sprintf("%d 4 * * *", version)), &b, args...)
			if len(b.Failed) != 0 || b.Changes != k {
				t.Fatalf("batched burst at %d timers (%v): %+v", n, args, b)
			}
			batched = append(batched, b)
		}
		sn := min(serial, k)
		version++
		var one burstOut
		c.Agent(t, node, withSchedule(set[:sn], version, fmt.Sprintf("%d 4 * * *", version)), &one, "burst", "--concurrency", "1")
		if len(one.Failed) != 0 || one.Reloads != sn {
			t.Fatalf("one-by-one at %d timers: %+v", n, one)
		}
		perChange := float64(one.TookMS) / float64(sn)
		for _, b := range batched {
			fmt.Printf("BENCH applyq timers=%d changes=%d slots=%d batched_s=%.2f batched_plans=%d batched_reloads=%d serial_changes=%d serial_s=%.2f serial_ms_per_change=%.1f serial_est_s=%.1f batched_reload_s=%.2f serial_reload_s=%.2f reconcile_s=%.1f rss_mb=%.1f\n",
				n, k, b.Concurrency, float64(b.TookMS)/1000, b.Plans, b.Reloads, sn, float64(one.TookMS)/1000, perChange, perChange*float64(k)/1000,
				float64(b.ReloadMS)/1000, float64(one.ReloadMS)/1000,
				float64(b.ReconcileMS)/1000, float64(b.VmHWMKB)/1024)
		}
	}
	c.Agent(t, node, []wire.Job{}, nil, "reconcile")
}

// withSchedule is js at version v with schedule s: a new timer file each.
func withSchedule(js []wire.Job, v int64, s string) []wire.Job {
	out := make([]wire.Job, len(js))
	for i, j := range js {
		j.Version, j.Schedule = v, s
		out[i] = j
	}
	return out
}

func writeNodeJSON(t *testing.T, node, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.Root(node), path), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestElectionDuringBurst (issue 16): every node of the shard holds
// BENCH_BURST_ELECTION_TIMERS cron timers and takes a burst of
// BENCH_BURST_CHANGES schedule changes at once (as 1,000 job changes
// reach each node of a 3-node shard), while a 10-second job runs on all
// three: the election latency (first node's timer start to the elected
// run's start) of the slots during the bursts.
func TestElectionDuringBurst(t *testing.T) {
	timers := envInt("BENCH_BURST_ELECTION_TIMERS", 1000)
	changes := min(envInt("BENCH_BURST_CHANGES", 1000), timers)
	set := jobs(timers)
	eachNode(t, func(n string) { c.Agent(t, n, set, nil, "reconcile") })
	j := c.NewJob(t, "acme", "*/10 * * * * *", "true", 30, 64, 0)
	eachNode(t, func(n string) { c.Agent(t, n, []wire.Job{j}, nil, "apply") })
	start := time.Now()
	reloads := make(map[string]burstOut)
	var mu sync.Mutex
	eachNode(t, func(n string) {
		var b burstOut
		c.Agent(t, n, withSchedule(set[:changes], 2, "0 4 * * *"), &b, "burst")
		mu.Lock()
		reloads[n] = b
		mu.Unlock()
	})
	end := time.Now()
	runs := c.WaitRuns(t, j.ID, 2*time.Minute+end.Sub(start), func(r []store.Run) bool {
		return len(r) > 0 && r[0].ScheduledAt.After(end.Add(10*time.Second)) // newest first
	})
	eachNode(t, func(n string) { c.Agent(t, n, []wire.Job{}, nil, "reconcile") })
	var lat []time.Duration
	for slot, d := range electionLatencies(t, j, runs) {
		if !slot.Before(start) && slot.Before(end) {
			lat = append(lat, d)
		}
	}
	if len(lat) == 0 {
		t.Fatal("no slot during the bursts")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var per []string
	for _, n := range c.Nodes {
		b := reloads[n]
		per = append(per, fmt.Sprintf("%s:%d/%.0fs", n, b.Reloads, float64(b.TookMS)/1000))
	}
	fmt.Printf("BENCH election_during_burst timers=%d changes=%d burst_s=%.1f slots=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f reloads=%s\n",
		timers, changes, end.Sub(start).Seconds(), len(lat), ms(lat[len(lat)/2]), ms(lat[len(lat)*99/100]), ms(lat[len(lat)-1]), strings.Join(per, ","))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// eachNode runs fn for every node at once and waits for all.
func eachNode(t *testing.T, fn func(node string)) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); fn(n) }()
	}
	wg.Wait()
}
