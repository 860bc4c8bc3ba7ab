package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// BenchmarkSweep times one lost-run pass over N active jobs (timeout 60 s,
// grace 2 min), set-based ("batched", SweepLostRuns), and optionally the
// pass before sweep_due_at ("per-job", SweepLostRunsPerJob), on the same
// data:
//   - nothing_due: daily jobs, each pass 30 s after the last; the per-job
//     pass still visits every job, the batched one reads the index only;
//   - steady: every-minute jobs, a pass a minute; before it (untimed) a
//     node reports every job's slot through the real outcome path
//     (RecordOutcomes, batches of 256), which moves the sweep's cursor
//     where that is done: the steady state of a shard of minutely jobs;
//   - due_reported: the same, but the runs are written with SQL, so the
//     cursor stands before the slot (old data, a late pass): every job
//     has one slot due, which has a run;
//   - due_lost: the same, but no slot was reported: N lost runs a pass.
//
// One op is one pass. Each sub-benchmark has a database of its own, made
// once (rows inserted with SQL, then one untimed pass so every job's
// sweep_due_at is exact). Env: HOSTCRON_BENCH_SWEEP_JOBS (sizes, default
// 1000,10000,100000), HOSTCRON_BENCH_SWEEP_PERJOB_MAX (the largest size
// the per-job pass is run at, default 0: none; at 100,000 one of its
// passes takes minutes). Run it with scripts/bench/sweep.sh, which also
// runs this same file on an older tree for before/after.
func BenchmarkSweep(b *testing.B) {
	sizes := []int{1000, 10000, 100000}
	if v := os.Getenv("HOSTCRON_BENCH_SWEEP_JOBS"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				b.Fatalf("HOSTCRON_BENCH_SWEEP_JOBS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	perJobMax := 0
	if v := os.Getenv("HOSTCRON_BENCH_SWEEP_PERJOB_MAX"); v != "" {
		var err error
		if perJobMax, err = strconv.Atoi(v); err != nil {
			b.Fatalf("HOSTCRON_BENCH_SWEEP_PERJOB_MAX: %v", err)
		}
	}
	impls := []struct {
		name  string
		sweep func(*store.Store, context.Context, time.Time, time.Duration) (store.SweepReport, error)
	}{
		{"batched", (*store.Store).SweepLostRuns},
		{"per-job", (*store.Store).SweepLostRunsPerJob},
	}
	scenarios := []struct {
		name, schedule string
		step           time.Duration                                         // between passes
		report         func(*testing.B, *store.Store, store.Node, time.Time) // nodes reported every job's slot (nil: none)
		outcomes       bool                                                  // report is the outcome path: its rate is a metric
	}{
		{"nothing_due", "0 0 * * *", 30 * time.Second, nil, false},
		{"steady", "* * * * *", time.Minute, reportOutcomes, true},
		{"due_reported", "* * * * *", time.Minute, reportSlot, false},
		{"due_lost", "* * * * *", time.Minute, nil, false},
	}
	const timeout, grace = 60 * time.Second, 2 * time.Minute
	// A pass at t0 has nothing due and swept_until just before the cutoff.
	t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 10*time.Hour + 20*time.Minute + 10*time.Second)
	ctx := context.Background()
	for _, n := range sizes {
		for _, sc := range scenarios {
			for _, impl := range impls {
				if impl.name == "per-job" && n > perJobMax {
					continue
				}
				var db *pgtest.DB
				var st *store.Store
				var node store.Node
				passes := 0
				b.Run(fmt.Sprintf("jobs=%d/%s/%s", n, sc.name, impl.name), func(b *testing.B) {
					if st == nil { // b.Run calls this more than once
						var err error
						if db, err = pgtest.Create(ctx, "hc_bench", 10); err != nil {
							b.Fatal(err)
						}
						st = db.Store
						node = seedSweepJobs(b, st, n, sc.schedule, t0.Add(-timeout-grace-time.Second))
						if _, err := impl.sweep(st, ctx, t0, grace); err != nil {
							b.Fatal(err)
						}
					}
					lost := 0
					var reporting time.Duration // untimed: the nodes' reports before each pass
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						passes++
						now := t0.Add(time.Duration(passes) * sc.step)
						if sc.report != nil {
							b.StopTimer()
							start := time.Now()
							sc.report(b, st, node, now.Add(-timeout-grace).Truncate(time.Minute))
							reporting += time.Since(start)
							b.StartTimer()
						}
						rep, err := impl.sweep(st, ctx, now, grace)
						if err != nil {
							b.Fatal(err)
						}
						if len(rep.Skipped) != 0 {
							b.Fatalf("skipped %d jobs", len(rep.Skipped))
						}
						lost += rep.Lost
					}
					b.StopTimer()
					b.ReportMetric(float64(lost)/float64(b.N), "lost/op")
					if sc.outcomes {
						// What moving the cursor costs the outcome path.
						b.ReportMetric(float64(n*b.N)/reporting.Seconds(), "outcomes/s")
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/job")
				})
				if db != nil {
					db.Drop()
				}
			}
		}
	}
}

// seedSweepJobs inserts n active jobs on schedule whose sweep stands at
// swept (and so does not_before), on one shard with one node, which it
// returns.
func seedSweepJobs(b *testing.B, st *store.Store, n int, schedule string, swept time.Time) store.Node {
	b.Helper()
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	if err != nil {
		b.Fatal(err)
	}
	node, _, err := st.CreateNode(ctx, sh.ID, "node1")
	if err != nil {
		b.Fatal(err)
	}
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", ShardID: sh.ID, LinuxUser: "acme", LinuxGroup: "acme"})
	if err != nil {
		b.Fatal(err)
	}
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/acme/public")
	if err != nil {
		b.Fatal(err)
	}
	// One tenant past MaxJobsPerTenant: the limit is the API's, and the
	// sweep does not look at tenants.
	if _, err := st.Pool().Exec(ctx, `INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, command, timeout_seconds,
			max_memory_mb, status, swept_until, not_before)
		SELECT $1, $2, $3, 'true', 60, 64, 'active', $4, $4 FROM generate_series(1, $5)`,
		tn.ID, wr.ID, schedule, swept, n); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `VACUUM ANALYZE cron_jobs`); err != nil {
		b.Fatal(err)
	}
	return node
}

// reportSlot writes a success of slot for every job with one statement,
// past the outcome path (the sweep's cursor stays).
func reportSlot(b *testing.B, st *store.Store, _ store.Node, slot time.Time) {
	b.Helper()
	if _, err := st.Pool().Exec(context.Background(), `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
		SELECT id::text || $1, id, version, $2, 'success' FROM cron_jobs`, runkey.Scheduled("", slot), slot); err != nil {
		b.Fatal(err)
	}
}

// reportOutcomes records a success of slot for every job through the
// outcome path the core API uses (RecordOutcomes, batches of 256, four
// at a time), as node reports would arrive.
func reportOutcomes(b *testing.B, st *store.Store, node store.Node, slot time.Time) {
	b.Helper()
	ctx := context.Background()
	rows, err := st.Pool().Query(ctx, `SELECT id::text, version FROM cron_jobs ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	var reqs []store.OutcomeRequest
	started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
	var id string
	var version int64
	_, err = pgx.ForEachRow(rows, []any{&id, &version}, func() error {
		reqs = append(reqs, store.OutcomeRequest{Node: node, JobID: id, Outcome: store.Outcome{
			RunKey: runkey.Scheduled(id, slot), Version: version, ScheduledAt: slot,
			StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess}})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	const batch, workers = 256, 4
	chunks := make(chan []store.OutcomeRequest)
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			var first error
			for c := range chunks {
				for _, a := range st.RecordOutcomes(ctx, c) {
					if a.Err != nil && first == nil {
						first = a.Err
					}
				}
			}
			errs <- first
		}()
	}
	for i := 0; i < len(reqs); i += batch {
		chunks <- reqs[i:min(i+batch, len(reqs))]
	}
	close(chunks)
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}
