package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/wire"
)

// gauges gathers reg into name{labels} -> value.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// TestNodeMetricsReadTheAgentsState: the agent's registry reads, at
// scrape, the timers in its unit directory, its outcome spool (depth, the
// oldest report's age by when it was spooled, dead letters), its last
// clock offset reading, and the shipper's drops; the config's
// metrics_addr defaults to loopback; the listener serves the registry.
func TestNodeMetricsReadTheAgentsState(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "node.json")
	b, _ := json.Marshal(map[string]string{"api_url": "http://127.0.0.1:1", "credential": "c",
		"unit_dir": filepath.Join(dir, "units"), "spool_dir": filepath.Join(dir, "spool"), "state_dir": filepath.Join(dir, "state"),
		"loki_url": "http://127.0.0.1:2"})
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconf.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsAddr != "127.0.0.1:9182" {
		t.Errorf("metrics_addr defaults to %q, want loopback 127.0.0.1:9182", cfg.MetricsAddr)
	}
	wants := filepath.Join(cfg.UnitDir, "timers.target.wants")
	for _, d := range []string{wants, cfg.StateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"cron-acme-a", "cron-acme-b", "cron-acme-c"} {
		if err := os.WriteFile(filepath.Join(cfg.UnitDir, n+".timer"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../cron-acme-a.timer", filepath.Join(wants, "cron-acme-a.timer")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.UnitDir, "other.timer"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Two reports spooled (the older one 10 minutes ago), one dead letter.
	jobs := []string{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "00000000-0000-4000-8000-000000000003"}
	report := func(job string) wire.Outcome {
		return wire.Outcome{RunKey: job + "#manual#1", Result: wire.ResultSuccess}
	}
	for _, job := range jobs[:2] {
		if err := outcome.Spool(cfg.SpoolDir, job, report(job)); err != nil {
			t.Fatal(err)
		}
	}
	old := filepath.Join(cfg.SpoolDir, outcome.SpoolName(jobs[0], report(jobs[0]).RunKey))
	var s outcome.Spooled
	raw, _ := os.ReadFile(old)
	_ = json.Unmarshal(raw, &s)
	s.SpooledAt = time.Now().Add(-10 * time.Minute)
	raw, _ = json.Marshal(s)
	if err := os.WriteFile(old, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := outcome.SpoolDead(cfg.SpoolDir, jobs[2], report(jobs[2]), io.EOF); err != nil {
		t.Fatal(err)
	}
	if err := clockoffset.Write(cfg.StateDir, clockoffset.Reading{OffsetSeconds: -3.5, MeasuredAt: time.Unix(1763700000, 0)}); err != nil {
		t.Fatal(err)
	}

	reg, _ := nodeMetrics(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	got := gauges(t, reg)
	for key, want := range map[string]float64{
		"hostcron_node_cron_timers{state=present}":              3,
		"hostcron_node_cron_timers{state=enabled}":              1,
		"hostcron_node_outcome_spool_pending":                   2,
		"hostcron_node_outcome_dead_letters":                    1,
		"hostcron_node_clock_offset_seconds":                    -3.5,
		"hostcron_node_clock_offset_measured_timestamp_seconds": 1763700000,
		"hostcron_node_logship_dropped_batches_total":           0,
		"hostcron_node_last_converge_timestamp_seconds":         0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if age := got["hostcron_node_outcome_spool_oldest_age_seconds"]; age < 590 || age > 900 {
		t.Errorf("oldest spooled report is %vs old, want about 600 (by when it was spooled, not the file's time)", age)
	}

	srv, err := metrics.Listen("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hostcron_node_outcome_spool_pending 2") {
		t.Errorf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}
}
