package housekeeping

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestSweepCountsLostRunsByShard: the lost runs a housekeeping tick
// records are counted in hostcron_runs_total{result="lost"} and, by the
// job's shard, in hostcron_shard_runs_total; a second tick that records
// nothing adds nothing.
func TestSweepCountsLostRunsByShard(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := jobWithMissedSlots(t, st, "acme", wire.StatusActive)
	b := jobWithMissedSlots(t, st, "bravo", wire.StatusFailed)
	shardOf := func(job string) string {
		var s string
		if err := st.Pool().QueryRow(ctx, `SELECT t.shard_id::text FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id WHERE j.id = $1`, job).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	m := metrics.NewCore(nil)
	h := housekeeper(st)
	h.Config.Metrics = m
	defer h.Release()
	now := time.Now()
	for i := 0; i < 2; i++ {
		if led, err := h.Tick(ctx, now); !led || err != nil {
			t.Fatalf("tick %d: led %v, %v", i, led, err)
		}
	}
	la, lb := lostRuns(t, st, a), lostRuns(t, st, b)
	if la == 0 || lb == 0 {
		t.Fatalf("no lost runs recorded (%d, %d): the test proves nothing", la, lb)
	}
	if got := testutil.ToFloat64(m.Runs.WithLabelValues("lost", "scheduled")); got != float64(la+lb) {
		t.Errorf("hostcron_runs_total{lost,scheduled} = %v, want %d", got, la+lb)
	}
	for job, want := range map[string]int{a: la, b: lb} {
		if got := testutil.ToFloat64(m.ShardRuns.WithLabelValues(shardOf(job), "lost")); got != float64(want) {
			t.Errorf("hostcron_shard_runs_total{shard of %s, lost} = %v, want %d", job, got, want)
		}
	}
}
