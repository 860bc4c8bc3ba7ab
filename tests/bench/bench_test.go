//go:build e2e && bench

// Package bench measures hostcron on real systemd nodes; it prints "BENCH"
// lines that scripts/bench/run.sh turns into a table. Not part of the test
// tier: `scripts/bench/run.sh` runs it.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

var c *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunTests(m, "bench", harness.Options{Nodes: 3}, func(k *harness.Cluster) { c = k }))
}

func jobs(n int) []wire.Job {
	out := make([]wire.Job, n)
	for i := range out {
		out[i] = wire.Job{ID: uuid.NewString(), Tenant: "acme", Version: 1, Enabled: true, User: "acme", Group: "acme",
			Webroot: "/srv/shared/www/acme/public", WebStorageDir: "/srv/shared/www", Schedule: "0 3 * * *", Timezone: "UTC",
			Command: "true", TimeoutSec: 60, MemoryMaxMB: 64}
	}
	return out
}

func timed(t *testing.T, node string, js []wire.Job, args ...string) (time.Duration, wire.NodeReport) {
	var rep wire.NodeReport
	start := time.Now()
	c.Agent(t, node, js, &rep, args...)
	return time.Since(start), rep
}

// TestConvergeVsNaive: 1,000 jobs onto an empty node with one reconcile,
// against the naive loop of write + daemon-reload + enable --now per job.
func TestConvergeVsNaive(t *testing.T) {
	n := envInt("BENCH_JOBS", 1000)
	d, rep := timed(t, "node1", jobs(n), "reconcile")
	if rep.Reloads != 1 || len(rep.Enabled) != n {
		t.Fatalf("reconcile report: %d enabled, %d reloads", len(rep.Enabled), rep.Reloads)
	}
	timed(t, "node1", []wire.Job{}, "reconcile")
	// The naive loop, as a shell script inside the node: one unit pair,
	// one daemon-reload and one enable --now per job.
	script := fmt.Sprintf(`set -e
for i in $(seq 1 %d); do
  printf '[Service]\nType=oneshot\nExecStart=/bin/true\n' >/etc/systemd/system/naive-$i.service
  printf '[Timer]\nOnCalendar=*-*-* 03:00:00 UTC\n[Install]\nWantedBy=timers.target\n' >/etc/systemd/system/naive-$i.timer
  systemctl daemon-reload
  systemctl enable --now naive-$i.timer 2>/dev/null
done`, n)
	start := time.Now()
	if out, err := c.Exec("node1", nil, "sh", "-c", script); err != nil {
		t.Fatalf("naive loop: %v %s", err, out)
	}
	naive := time.Since(start)
	_, _ = c.Exec("node1", nil, "sh", "-c", "systemctl disable --now 'naive-*.timer' >/dev/null 2>&1; rm -f /etc/systemd/system/naive-*; systemctl daemon-reload")
	fmt.Printf("BENCH converge_jobs=%d reconcile_s=%.2f naive_s=%.2f ratio=%.1f\n", n, d.Seconds(), naive.Seconds(), naive.Seconds()/d.Seconds())
}

// TestNoopReconcileAt10k: reconcile with nothing changed on a node with
// 10,000 cron timers.
func TestNoopReconcileAt10k(t *testing.T) {
	n := envInt("BENCH_TIMERS", 10000)
	js := jobs(n)
	first, _ := timed(t, "node2", js, "reconcile")
	var runs []time.Duration
	for i := 0; i < 3; i++ {
		d, rep := timed(t, "node2", js, "reconcile")
		if rep.Changed() || rep.Reloads != 0 {
			t.Fatalf("no-op reconcile changed something: %+v", rep)
		}
		runs = append(runs, d)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
	timed(t, "node2", []wire.Job{}, "reconcile")
	fmt.Printf("BENCH noop_reconcile timers=%d first_s=%.2f noop_median_s=%.2f\n", n, first.Seconds(), runs[1].Seconds())
}

// TestElectionLatency: for each slot of a 10-second job on three nodes,
// the time from the first node's timer firing to the elected run's start.
func TestElectionLatency(t *testing.T) {
	slots := envInt("BENCH_SLOTS", 20)
	j := c.NewJob(t, "acme", "*/10 * * * * *", "true", 30, 64, 0)
	for _, n := range c.Nodes {
		c.Agent(t, n, []wire.Job{j}, nil, "apply")
	}
	runs := c.WaitRuns(t, j.ID, time.Duration(slots+3)*10*time.Second, func(r []store.Run) bool { return len(r) >= slots })
	for _, n := range c.Nodes {
		c.Agent(t, n, nil, nil, "remove", j.UnitName())
	}
	var lat []time.Duration
	for _, d := range electionLatencies(t, j, runs) {
		lat = append(lat, d)
	}
	if len(lat) == 0 {
		t.Fatal("no slot matched")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("BENCH election slots=%d p50_ms=%.1f p99_ms=%.1f\n", len(lat),
		float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)*99/100].Microseconds())/1000)
}

// electionLatencies is, per slot of j's runs, the time from the first
// node's timer starting the unit (systemd's "Starting", on any node) to
// the elected run's start.
func electionLatencies(t *testing.T, j wire.Job, runs []store.Run) map[time.Time]time.Duration {
	t.Helper()
	// The first "Starting" of the unit per slot, on any node.
	first := map[time.Time]time.Time{}
	for _, n := range c.Nodes {
		out, err := c.Exec(n, nil, "journalctl", "-q", "-o", "json", "_PID=1", "UNIT="+j.UnitName()+".service",
			"MESSAGE_ID=7d4958e842da4a758f6c1cdc7b36dcc5")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var e map[string]string
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			us, _ := strconv.ParseInt(e["__REALTIME_TIMESTAMP"], 10, 64)
			at := time.UnixMicro(us)
			slot := at.Truncate(10 * time.Second)
			if f, ok := first[slot]; !ok || at.Before(f) {
				first[slot] = at
			}
		}
	}
	lat := map[time.Time]time.Duration{}
	for _, r := range runs {
		if f, ok := first[r.ScheduledAt]; ok && r.StartedAt != nil {
			lat[r.ScheduledAt] = r.StartedAt.Sub(f)
		}
	}
	return lat
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
