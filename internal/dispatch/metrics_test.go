package dispatch

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/api/serviceerror"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/workflows"
)

// TestDispatchLagAndOutboxDepth: a pass observes the lag of each row it
// dispatched (written 30 s ago: at least 30 s each) and none for a row
// Temporal refused; the outbox collector reads the refused row's depth and
// age from the database, and says so when the database does not answer.
func TestDispatchLagAndOutboxDepth(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	ids := queue(t, st, 3, 1)
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_job_tasks SET created_at = now() - interval '30 seconds'`); err != nil {
		t.Fatal(err)
	}
	refused := workflows.JobWorkflowID(ids[0])
	f := &fakeTemporal{fail: func(wf string) error {
		if wf == refused {
			return serviceerror.NewInvalidArgument("refused")
		}
		return nil
	}}
	m := metrics.NewCore(nil)
	d := &Dispatcher{Store: st, Temporal: f, Log: quiet(), Metrics: m}
	if sent, err := d.Pass(ctx); sent != 2 || err != nil {
		t.Fatalf("pass: sent %d, %v", sent, err)
	}
	var pb dto.Metric
	if err := m.DispatchLag.(prometheus.Metric).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if h := pb.GetHistogram(); h.GetSampleCount() != 2 || h.GetSampleSum() < 60 {
		t.Errorf("dispatch lag: %d samples summing %.1fs, want 2 of at least 30s", h.GetSampleCount(), h.GetSampleSum())
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&metrics.OutboxCollector{Source: st, Log: quiet()})
	want := func(name string, check func(float64) bool) {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				if v := mf.GetMetric()[0].GetGauge().GetValue(); !check(v) {
					t.Errorf("%s = %v", name, v)
				}
				return
			}
		}
		t.Errorf("%s not collected", name)
	}
	want("hostcron_outbox_pending", func(v float64) bool { return v == 1 })
	want("hostcron_outbox_oldest_pending_age_seconds", func(v float64) bool { return v >= 30 && v < 300 })
	want("hostcron_outbox_scrape_ok", func(v float64) bool { return v == 1 })

	st.Pool().Close()
	want("hostcron_outbox_scrape_ok", func(v float64) bool { return v == 0 })
	if n, err := testutil.GatherAndCount(reg, "hostcron_outbox_pending"); err != nil || n != 0 {
		t.Errorf("with the database gone: %d outbox_pending series (%v), want none rather than a made-up one", n, err)
	}
}

// fakeCoreStore answers SetProvisioned with set and err.
type fakeCoreStore struct {
	workflows.CoreStore
	set bool
	err error
}

func (f fakeCoreStore) SetProvisioned(context.Context, string, int64, wire.Status, string, int) (bool, error) {
	return f.set, f.err
}

// TestProvisioningVerdictsCounted: the core's SetJobStatus activity, on
// the store the core worker is given (CountingStore), counts a recorded
// verdict by its status, one the job moved on from as superseded, and
// nothing for a database error (the activity is retried).
func TestProvisioningVerdictsCounted(t *testing.T) {
	m := metrics.NewCore(nil)
	act := func(set bool, err error, status wire.Status) {
		a := &workflows.CoreActivities{Store: CountingStore{CoreStore: fakeCoreStore{set: set, err: err}, Metrics: m}}
		_, _ = a.SetJobStatus(context.Background(), "00000000-0000-4000-8000-000000000001", 1, status, "", 1)
	}
	act(true, nil, wire.StatusActive)
	act(true, nil, wire.StatusActive)
	act(true, nil, wire.StatusFailed)
	act(false, nil, wire.StatusActive)
	act(false, errors.New("database down"), wire.StatusActive)
	exp := `
# HELP hostcron_provisionings_total Provisioning verdicts reported by job workflows: the status reported (active, failed, disabled) when recorded, superseded when the job had moved on.
# TYPE hostcron_provisionings_total counter
hostcron_provisionings_total{result="active"} 2
hostcron_provisionings_total{result="failed"} 1
hostcron_provisionings_total{result="superseded"} 1
`
	if err := testutil.CollectAndCompare(m.Provisionings, strings.NewReader(exp)); err != nil {
		t.Error(err)
	}
}
