package unitmgr

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/wire"
)

func sampleCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var pb dto.Metric
	if err := o.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}

// TestApplyFeedsTheNodeMetrics: the manager's applies, observed by the
// agent's metrics, time each plan+apply by operation and result, time the
// daemon-reload, count the steps executed by kind, and set the converge
// time only on a successful reconcile to the core's set (not an apply,
// not an operator's reconcile). CountTimers sees the timers it left.
func TestApplyFeedsTheNodeMetrics(t *testing.T) {
	m, f := testManager(t)
	f.hold(job(idA)) // loaded before: its new files need a reload
	nm := metrics.NewNode(nil)
	m.SetObserver(nm)
	ctx := context.Background()
	rep, err := m.Apply(ctx, []wire.Job{job(idA), job(idB), job(idC, disabled)})
	if err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]float64{
		"enable": 2, "reload": 1, "start": 2, "write": float64(len(rep.Written) + len(rep.Specs)),
	} {
		if got := testutil.ToFloat64(nm.Steps.WithLabelValues(kind)); got != want {
			t.Errorf("steps{kind=%s} = %v, want %v", kind, got, want)
		}
	}
	if n := sampleCount(t, nm.ApplyDuration.WithLabelValues("apply", "ok")); n != 1 {
		t.Errorf("apply durations observed: %d, want 1", n)
	}
	if n := sampleCount(t, nm.ReloadDuration); n != 1 {
		t.Errorf("reload durations observed: %d, want 1", n)
	}
	if v := testutil.ToFloat64(nm.LastConverge); v != 0 {
		t.Errorf("an apply set the converge time: %v", v)
	}
	if present, enabled, err := CountTimers(m.layout.UnitDir); err != nil || present != 3 || enabled != 2 {
		t.Errorf("CountTimers = %d present, %d enabled, %v; want 3 and 2", present, enabled, err)
	}

	if _, err := m.ReconcileExactly(ctx, []wire.Job{job(idA), job(idB), job(idC, disabled)}); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(nm.LastConverge); v != 0 {
		t.Errorf("an operator's reconcile set the converge time: %v", v)
	}
	if _, err := m.Reconcile(ctx, wire.DesiredSet{Jobs: []wire.Job{job(idA), job(idB), job(idC, disabled)}}); err != nil {
		t.Fatal(err)
	}
	if v, want := testutil.ToFloat64(nm.LastConverge), float64(testNow.Unix()); v != want {
		t.Errorf("converge time %v, want %v (the manager's clock at the reconcile)", v, want)
	}
	if n := sampleCount(t, nm.ApplyDuration.WithLabelValues("reconcile", "ok")); n != 2 {
		t.Errorf("reconcile durations observed: %d, want 2", n)
	}
}
