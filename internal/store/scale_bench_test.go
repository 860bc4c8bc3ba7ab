package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// scaleTenantJobs is how many jobs each seeded tenant holds: the ceiling
// of a tenant's quota (quota.MaxJobsCeiling), so a tenant's job list is as
// long as it can get.
const scaleTenantJobs = 1000

// BenchmarkScale measures what the core's store costs per job at N jobs
// (default 1,000, 10,000 and 100,000) on one shard, so the slopes that
// docs/scale.md extrapolates from are visible. One database per size,
// seeded with set-based SQL: N active every-minute jobs of tenants of
// 1,000 jobs each (timeout 60 s, max_failures 0), one node. Sub-benchmarks,
// in the order they run on that database:
//   - sweep_nothing_due: one lost-run pass with no job due (0.1 ms
//     after the last pass);
//   - sweep_all_due: one pass a minute later, every job one slot due that
//     its node reported (a success row inserted untimed before the pass);
//   - desired_set: NodeDesiredJobs for the node (the whole shard's jobs,
//     what ConvergeNode reads) and its JSON encoding, which is the size of
//     the Temporal payload it travels in (B/set), and what reading and
//     encoding it allocates (B/op);
//   - desired_pages: the same set as a node reads it since paged desired
//     sets: NodeDesiredPage after page, 500 jobs each, each page JSON
//     encoded as the API answers it, assembled (desiredset.Assemble);
//     B/page is the largest page's answer;
//   - list_page_100, list_page_1000: ListJobs of one tenant of 1,000
//     jobs: its last page of 100 (after the 900th job), and a page of
//     1,000 (the API's default limit: the whole tenant); 20 reads an op;
//   - outcome_success, outcome_exit_code: RecordOutcome, one transaction
//     each, serially on one connection, on distinct jobs; 200 an op;
//   - table_bytes: nothing timed; cron_jobs on disk (indexes included)
//     per job as seeded, cron_job_runs per run after the writes above.
//
// Custom metrics: µs/job (sweep, desired set), B/job and B/set, µs/page,
// µs/outcome, B/run. Env: HOSTCRON_BENCH_SCALE_JOBS (sizes). Run it with
// scripts/bench/scale.sh.
func BenchmarkScale(b *testing.B) {
	sizes := []int{1000, 10000, 100000}
	if v := os.Getenv("HOSTCRON_BENCH_SCALE_JOBS"); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				b.Fatalf("HOSTCRON_BENCH_SCALE_JOBS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	ctx := context.Background()
	const timeout, grace = 60 * time.Second, 2 * time.Minute
	for _, n := range sizes {
		db, err := pgtest.Create(ctx, "hc_scale", 10)
		if err != nil {
			b.Fatal(err)
		}
		st := db.Store
		// t0 is hh:mm:10; the seed's sweep stands just before the cutoff
		// of a pass at t0, which an untimed pass then makes exact.
		t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 10*time.Hour + 20*time.Minute + 10*time.Second)
		seeded := seedScale(b, st, n, t0.Add(-timeout-grace-time.Second))
		if _, err := st.SweepLostRuns(ctx, t0, grace); err != nil {
			b.Fatal(err)
		}
		clock := t0
		sweep := func(b *testing.B, now time.Time) {
			rep, err := st.SweepLostRuns(ctx, now, grace)
			if err != nil {
				b.Fatal(err)
			}
			if len(rep.Skipped) != 0 || rep.Lost != 0 {
				b.Fatalf("pass at %s: %d lost, %d skipped", now, rep.Lost, len(rep.Skipped))
			}
			clock = now
		}
		perJob := func(b *testing.B) {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e3, "µs/job")
		}

		b.Run(fmt.Sprintf("jobs=%d/sweep_nothing_due", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sweep(b, clock.Add(100*time.Microsecond))
			}
			perJob(b)
		})
		b.Run(fmt.Sprintf("jobs=%d/sweep_all_due", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				now := clock.Truncate(time.Minute).Add(time.Minute + 10*time.Second)
				reportSlot(b, st, store.Node{}, now.Add(-timeout-grace).Truncate(time.Minute))
				b.StartTimer()
				sweep(b, now)
			}
			perJob(b)
		})
		b.Run(fmt.Sprintf("jobs=%d/desired_set", n), func(b *testing.B) {
			b.ReportAllocs() // what the core's worker allocates per converge
			var size int
			for i := 0; i < b.N; i++ {
				set, ok, err := st.NodeDesiredJobs(ctx, seeded.node.ID)
				if err != nil || !ok {
					b.Fatalf("desired set: ok %v, %v", ok, err)
				}
				if len(set.Jobs) != n {
					b.Fatalf("desired set: %d jobs, want %d", len(set.Jobs), n)
				}
				data, err := json.Marshal(set)
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			perJob(b)
			b.ReportMetric(float64(size), "B/set")
			b.ReportMetric(float64(size)/float64(n), "B/job")
		})
		b.Run(fmt.Sprintf("jobs=%d/desired_pages", n), func(b *testing.B) {
			b.ReportAllocs() // what core-api allocates per converge, over all its pages
			var largest int
			for i := 0; i < b.N; i++ {
				var jobs int
				set, err := desiredset.Assemble(ctx, func(ctx context.Context, after string) (wire.DesiredPage, error) {
					p, _, err := st.NodeDesiredPage(ctx, seeded.node.ID, after, wire.DesiredPageSize)
					if err != nil {
						return p, err
					}
					data, err := json.Marshal(p)
					largest = max(largest, len(data))
					jobs += len(p.Jobs)
					return p, err
				})
				if err != nil || len(set.Jobs) != n || jobs != n {
					b.Fatalf("desired pages: %d jobs, want %d: %v", len(set.Jobs), n, err)
				}
			}
			perJob(b)
			b.ReportMetric(float64(largest), "B/page")
		})
		const pages = 20
		for _, lp := range []struct {
			name  string
			after *store.JobPos
			limit int
		}{
			{"list_page_100", &seeded.pos900, 100}, // a tenant's last page of 100
			{"list_page_1000", nil, 1000},          // the API's default page: a whole tenant
		} {
			b.Run(fmt.Sprintf("jobs=%d/%s", n, lp.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					for p := 0; p < pages; p++ {
						jobs, _, err := st.ListJobs(ctx, seeded.tenant, store.JobQuery{After: lp.after, Limit: lp.limit})
						if err != nil {
							b.Fatal(err)
						}
						if len(jobs) != lp.limit {
							b.Fatalf("page of %d jobs", len(jobs))
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pages)/1e3, "µs/page")
			})
		}
		const outcomes = 200
		next := 0 // outcomes recorded so far: job next % n, a slot of its own
		for _, res := range []wire.Result{wire.ResultSuccess, wire.ResultExitCode} {
			b.Run(fmt.Sprintf("jobs=%d/outcome_%s", n, res), func(b *testing.B) {
				exit := 1
				for i := 0; i < b.N; i++ {
					for k := 0; k < outcomes; k++ {
						j := seeded.jobs[next%n]
						// Slots after the sweep's clock, a minute apart per round of all jobs.
						slot := clock.Truncate(time.Minute).Add(time.Duration(1+next/n) * time.Minute)
						next++
						start, end := slot.Add(time.Second), slot.Add(3*time.Second)
						o := store.Outcome{RunKey: runkey.Scheduled(j, slot), Version: 1, ScheduledAt: slot,
							StartedAt: &start, FinishedAt: &end, Result: res}
						if res == wire.ResultExitCode {
							o.ExitCode, o.FailureReason = &exit, "exit code 1"
						}
						r, err := st.RecordOutcome(ctx, seeded.node, j, o)
						if err != nil {
							b.Fatal(err)
						}
						if r.Duplicate {
							b.Fatalf("outcome %s: a duplicate", o.RunKey)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*outcomes)/1e3, "µs/outcome")
			})
		}
		// What the rows take on disk, indexes and TOAST included: the jobs
		// as seeded (before any update left dead versions), the runs after
		// the writes above.
		b.Run(fmt.Sprintf("jobs=%d/table_bytes", n), func(b *testing.B) {
			var runBytes, runs int64
			for i := 0; i < b.N; i++ {
				if err := st.Pool().QueryRow(ctx, `SELECT pg_total_relation_size('cron_job_runs'),
					(SELECT count(*) FROM cron_job_runs)`).Scan(&runBytes, &runs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(seeded.jobBytes)/float64(n), "B/job")
			b.ReportMetric(float64(runBytes)/float64(runs), "B/run")
			b.ReportMetric(float64(runs), "runs")
		})
		db.Drop()
	}
}

type scaleSeed struct {
	node   store.Node
	tenant string       // the first tenant
	pos900 store.JobPos // the first tenant's 900th job
	jobs   []string     // every job's id
	// jobBytes is cron_jobs on disk, indexes included, as seeded.
	jobBytes int64
}

// seedScale inserts n active every-minute jobs, in tenants of
// scaleTenantJobs, on one shard with one node; their sweep stands at
// swept.
func seedScale(b *testing.B, st *store.Store, n int, swept time.Time) scaleSeed {
	b.Helper()
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	if err != nil {
		b.Fatal(err)
	}
	var seed scaleSeed
	if seed.node, _, err = st.CreateNode(ctx, sh.ID, "node1"); err != nil {
		b.Fatal(err)
	}
	tenants := (n + scaleTenantJobs - 1) / scaleTenantJobs
	pool := st.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (name, shard_id, linux_user, linux_group)
		SELECT 'tenant' || g, $1, 'tenant' || g, 'tenant' || g FROM generate_series(1, $2) g`, sh.ID, tenants); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webroots (tenant_id, path)
		SELECT id, '/srv/shared/www/' || name || '/public' FROM tenants`); err != nil {
		b.Fatal(err)
	}
	// Job g belongs to tenant (g-1)/1000+1; created a second apart, so a
	// tenant's list has a stable order. The command is a typical one.
	if _, err := pool.Exec(ctx, `INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, command, working_directory,
			timeout_seconds, max_memory_mb, max_failures, status, swept_until, not_before, created_at)
		SELECT w.tenant_id, w.id, '* * * * *', 'php artisan schedule:run >> storage/logs/cron.log 2>&1', 'current',
			60, 256, 0, 'active', $1::timestamptz, $1::timestamptz, $1::timestamptz - interval '1 day' + g * interval '1 second'
		FROM generate_series(1, $2) g
		JOIN tenants t ON t.name = 'tenant' || ((g - 1) / $3 + 1)
		JOIN webroots w ON w.tenant_id = t.id`, swept, n, scaleTenantJobs); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		b.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size('cron_jobs')`).Scan(&seed.jobBytes); err != nil {
		b.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT id::text FROM cron_jobs ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		seed.jobs = append(seed.jobs, id)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(seed.jobs) != n {
		b.Fatalf("seeded %d jobs, want %d", len(seed.jobs), n)
	}
	if err := pool.QueryRow(ctx, `SELECT t.id::text, j.created_at, j.id::text FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id
		WHERE t.name = 'tenant1' ORDER BY j.created_at, j.id OFFSET 899 LIMIT 1`).
		Scan(&seed.tenant, &seed.pos900.CreatedAt, &seed.pos900.ID); err != nil {
		b.Fatal(err)
	}
	return seed
}
