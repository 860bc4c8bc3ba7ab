package api

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hostcron/hostcron/internal/metrics"
)

// TestOutcomeMetrics: the outcome endpoint counts what it records, by
// result and trigger, lost and platform_error also by the node's shard;
// observes the ingestion lag; counts the auto-disable it caused; and a
// redelivery counts nothing.
func TestOutcomeMetrics(t *testing.T) {
	m := metrics.NewCore(prometheus.NewRegistry())
	v := newEnvWith(t, Config{Metrics: m})
	id := v.createJob(`,"max_failures":2`)["id"].(string)
	v.activate(id)
	slot := time.Now().UTC().Truncate(5 * time.Minute).Add(-time.Hour)
	at := func(i int) time.Time { return slot.Add(time.Duration(i) * 5 * time.Minute) }
	v.outcome(id, at(0), 1, "success")
	v.outcome(id, at(0), 1, "success") // a redelivery: nothing new
	v.outcome(id, at(1), 1, "platform_error")
	v.outcome(id, at(2), 1, "exit_code")
	if _, r := v.outcome(id, at(3), 1, "timeout"); r["auto_disabled"] != true {
		t.Fatalf("second failure did not auto-disable: %v", r)
	}
	for _, c := range []struct {
		c    prometheus.Collector
		want float64
	}{
		{m.Runs.WithLabelValues("success", "scheduled"), 1},
		{m.Runs.WithLabelValues("platform_error", "scheduled"), 1},
		{m.Runs.WithLabelValues("exit_code", "scheduled"), 1},
		{m.Runs.WithLabelValues("timeout", "scheduled"), 1},
		{m.ShardRuns.WithLabelValues(v.shardID, "platform_error"), 1},
		{m.ShardRuns.WithLabelValues(v.shardID, "exit_code"), 0},
		{m.AutoDisables, 1},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", describe(c.c), got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.IngestionLag); n != 1 {
		t.Fatalf("ingestion lag: %d series", n)
	}
	if got := histCount(t, m.IngestionLag); got != 4 {
		t.Errorf("ingestion lag observed %d times, want 4 (one per recorded outcome)", got)
	}
}

func describe(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc, 1)
	c.Describe(ch)
	return (<-ch).String()
}

func histCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	pb := new(dto.Metric)
	if err := (<-ch).Write(pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}
