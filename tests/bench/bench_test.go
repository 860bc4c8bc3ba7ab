//go:build e2e && bench

// Package bench measures hostcron on real systemd nodes; it prints "BENCH"
// lines that scripts/bench/run.sh turns into a table. Not part of the test
// tier: `scripts/bench/run.sh` runs it.
package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	return timedWith(t, agentBin, node, js, args...)
}

// agentBin is the node agent the benchmarks time: the one the nodes
// have installed from this tree's package.
const agentBin = "/usr/local/bin/node-agent"

// baseBin is where a baseline agent goes in each node (BENCH_BASE_AGENT,
// a host path): timing it beside agentBin in the same run and cluster
// gives before/after numbers under the same load.
const baseBin = "/usr/local/bin/node-agent-base"

// agents are the agents to time: this tree's, and the baseline if given.
func agents(t *testing.T) map[string]string {
	out := map[string]string{"new": agentBin}
	src := os.Getenv("BENCH_BASE_AGENT")
	if src == "" {
		return out
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("BENCH_BASE_AGENT: %v", err)
	}
	for _, n := range c.Nodes {
		if err := os.WriteFile(filepath.Join(c.Root(n), baseBin), b, 0o755); err != nil {
			t.Fatalf("install the baseline agent in %s: %v", n, err)
		}
	}
	out["base"] = baseBin
	return out
}

// timedWith runs agent (a path in the node) with js and prints the
// phase lines (observed, applied) it logged, prefixed by PHASES.
func timedWith(t *testing.T, agent, node string, js []wire.Job, args ...string) (time.Duration, wire.NodeReport) {
	t.Helper()
	stdin, _ := json.Marshal(js)
	start := time.Now()
	out, err := c.Exec(node, stdin, append([]string{agent}, args...)...)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s: %s %v: %v\n%s", node, agent, args, err, out)
	}
	var rep wire.NodeReport
	dec := json.NewDecoder(strings.NewReader(out[max(strings.IndexByte(out, '{'), 0):]))
	for {
		var v map[string]json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		var msg string
		_ = json.Unmarshal(v["msg"], &msg)
		switch {
		case msg == "observed" || msg == "applied":
			line, _ := json.Marshal(v)
			fmt.Printf("PHASES agent=%s jobs=%d %s\n", filepath.Base(agent), len(js), line)
		case v["msg"] == nil:
			b, _ := json.Marshal(v)
			_ = json.Unmarshal(b, &rep)
		}
	}
	return took, rep
}

// TestConvergeVsNaive: 1,000 jobs onto an empty node with one reconcile,
// against the naive loop of write + daemon-reload + enable --now per job
// (BENCH_NAIVE=0: not run; BENCH_NAIVE_JOBS: its job count, 1,000 by
// default, with this tree's reconcile timed again at that count for the
// ratio). With BENCH_BASE_AGENT the baseline agent converges the same jobs
// too; each converge is undone with this tree's agent. BENCH_ROUNDS (1)
// converges that many times with each agent, the order alternating; each
// agent's line is its median, and the ratio is against this tree's.
func TestConvergeVsNaive(t *testing.T) {
	n := envInt("BENCH_JOBS", 1000)
	rounds := max(1, envInt("BENCH_ROUNDS", 1))
	d := convergeRounds(t, agents(t), n, rounds)
	if os.Getenv("BENCH_NAIVE") == "0" {
		return
	}
	nn := envInt("BENCH_NAIVE_JOBS", n)
	if nn != n {
		d = convergeRounds(t, map[string]string{"new": agentBin}, nn, rounds)
	}
	// The naive loop, as a shell script inside the node: one unit pair,
	// one daemon-reload and one enable --now per job.
	script := fmt.Sprintf(`set -e
for i in $(seq 1 %d); do
  printf '[Service]\nType=oneshot\nExecStart=/bin/true\n' >/etc/systemd/system/naive-$i.service
  printf '[Timer]\nOnCalendar=*-*-* 03:00:00 UTC\n[Install]\nWantedBy=timers.target\n' >/etc/systemd/system/naive-$i.timer
  systemctl daemon-reload
  systemctl enable --now naive-$i.timer 2>/dev/null
done`, nn)
	start := time.Now()
	if out, err := c.Exec("node1", nil, "sh", "-c", script); err != nil {
		t.Fatalf("naive loop: %v %s", err, out)
	}
	naive := time.Since(start)
	_, _ = c.Exec("node1", nil, "sh", "-c", "systemctl disable --now 'naive-*.timer' >/dev/null 2>&1; rm -f /etc/systemd/system/naive-*; systemctl daemon-reload")
	fmt.Printf("BENCH converge_jobs=%d reconcile_s=%.2f naive_s=%.2f ratio=%.1f\n", nn, d.Seconds(), naive.Seconds(), naive.Seconds()/d.Seconds())
}

// convergeRounds converges n jobs onto node1 rounds times with each of
// agents ("base" first in odd rounds, "new" first in even ones, so that
// neither always follows the other), prints each agent's median, and
// returns this tree's.
func convergeRounds(t *testing.T, agents map[string]string, n, rounds int) time.Duration {
	took := map[string][]time.Duration{}
	for r := range rounds {
		order := []string{"base", "new"}
		if r%2 == 1 {
			order = []string{"new", "base"}
		}
		for _, name := range order {
			if bin, ok := agents[name]; ok {
				took[name] = append(took[name], convergeOnce(t, name, bin, "node1", n))
			}
		}
	}
	for _, name := range []string{"base", "new"} {
		if ds, ok := took[name]; ok {
			fmt.Printf("BENCH agent=%s converge_jobs=%d reconcile_s=%.2f rounds=%d\n", name, n, median(ds).Seconds(), rounds)
		}
	}
	return median(took["new"])
}

// median is the middle of ds (the mean of the two middles of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

// convergeOnce converges n jobs onto node (empty) with bin, checks that
// systemd has them enabled and running, and removes them again with this
// tree's agent (the removal is not what is compared).
func convergeOnce(t *testing.T, name, bin, node string, n int) time.Duration {
	took, rep := timedWith(t, bin, node, jobs(n), "reconcile")
	if len(rep.Enabled) != n || len(rep.Failed) != 0 {
		t.Fatalf("%s reconcile report: %d enabled, %d failed", name, len(rep.Enabled), len(rep.Failed))
	}
	checkEnabled(t, node, n)
	timedWith(t, agentBin, node, []wire.Job{}, "reconcile")
	fmt.Printf("BENCH converge_once agent=%s jobs=%d reconcile_s=%.2f reloads=%d\n", name, n, took.Seconds(), rep.Reloads)
	return took
}

// TestNoopReconcileAt10k: reconcile with nothing changed on a node with
// 10,000 cron timers, and the first reconcile that put them there. The
// baseline agent (BENCH_BASE_AGENT) works on node2, this tree's on node3,
// each from an empty node; the timers stay until the cluster goes
// (removing 10,000 took the baseline 14 minutes; BENCH_REMOVE=1 times
// this tree's agent removing them).
func TestNoopReconcileAt10k(t *testing.T) {
	n := envInt("BENCH_TIMERS", 10000)
	js := jobs(n)
	ag := agents(t)
	for _, run := range []struct{ name, node string }{{"base", "node2"}, {"new", "node3"}} {
		bin, ok := ag[run.name]
		if !ok {
			continue
		}
		first, rep := timedWith(t, bin, run.node, js, "reconcile")
		if len(rep.Enabled) != n {
			t.Fatalf("first reconcile enabled %d timers, want %d", len(rep.Enabled), n)
		}
		checkEnabled(t, run.node, n)
		var runs []time.Duration
		for i := 0; i < 3; i++ {
			d, rep := timedWith(t, bin, run.node, js, "reconcile")
			if rep.Changed() || rep.Reloads != 0 {
				t.Fatalf("no-op reconcile changed something: %+v", rep)
			}
			runs = append(runs, d)
		}
		sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
		fmt.Printf("BENCH agent=%s noop_reconcile timers=%d first_s=%.2f noop_median_s=%.2f\n", run.name, n,
			first.Seconds(), runs[1].Seconds())
		if os.Getenv("BENCH_REMOVE") == "1" {
			removal, _ := timedWith(t, agentBin, run.node, []wire.Job{}, "reconcile")
			fmt.Printf("BENCH agent=new remove_all timers=%d remove_s=%.2f\n", n, removal.Seconds())
		}
	}
}

// checkEnabled fails unless n cron timers are enabled and active on node,
// as systemd itself says.
func checkEnabled(t *testing.T, node string, n int) {
	t.Helper()
	out, err := c.Exec(node, nil, "sh", "-c",
		"ls /etc/systemd/system/timers.target.wants | grep -c '^cron-.*\\.timer$'; systemctl list-units --no-legend --state=active 'cron-*.timer' | wc -l; "+
			"systemctl is-enabled $(ls /etc/systemd/system/timers.target.wants | grep '^cron-' | head -1)")
	if err != nil {
		t.Fatalf("count timers on %s: %v %s", node, err, out)
	}
	if f := strings.Fields(out); len(f) != 3 || f[0] != strconv.Itoa(n) || f[1] != strconv.Itoa(n) || f[2] != "enabled" {
		t.Fatalf("%s: enabled and active cron timers, and is-enabled of one: %q, want %d, %d, enabled", node, out, n, n)
	}
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
