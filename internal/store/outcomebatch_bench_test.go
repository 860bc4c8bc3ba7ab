package store_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// BenchmarkOutcomeIngest measures outcome recording in the store alone
// (no HTTP), fsync on, on 200 jobs of one tenant (one outcome in seven a
// failure, as scripts/bench/outcomes) with 500 runs of history each in
// monthly partitions (seedIngestHistory): distinct run keys, b.N outcomes
// per sub-benchmark, in the ways the core can record them:
//   - alone_serial: RecordOutcome, one transaction each, one caller;
//   - alone_c32: the same from 32 callers at once (the unbatched core);
//   - batcher_c32: OutcomeBatcher from 32 callers at once (the core);
//   - batch_256: RecordOutcomes of 256 outcomes, one caller (one group
//     commit as large as a batch gets);
//   - round_trip, commit: where the time goes: one "SELECT 1" round trip,
//     and one transaction that commits a write (a WAL flush), in one
//     round trip each, serially (outcomes/s here is round trips or
//     commits per second).
//
// Custom metric: outcomes/s. Run: scripts/with-pg.sh go test -run '^$'
// -bench OutcomeIngest -benchtime 4000x ./internal/store/
func BenchmarkOutcomeIngest(b *testing.B) {
	f := newIngestFixture(b)
	ctx := context.Background()
	alone := func(r store.OutcomeRequest) error {
		_, err := f.st.RecordOutcome(ctx, r.Node, r.JobID, r.Outcome)
		return err
	}
	perSecond := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "outcomes/s")
	}
	b.Run("alone_serial", func(b *testing.B) {
		f.concurrently(b, b.N, 1, alone)
		perSecond(b)
	})
	b.Run("alone_c32", func(b *testing.B) {
		f.concurrently(b, b.N, 32, alone)
		perSecond(b)
	})
	b.Run("batcher_c32", func(b *testing.B) {
		batcher := f.st.NewOutcomeBatcher(store.BatchConfig{})
		f.concurrently(b, b.N, 32, func(r store.OutcomeRequest) error {
			_, err := batcher.RecordOutcome(ctx, r.Node, r.JobID, r.Outcome)
			return err
		})
		perSecond(b)
	})
	b.Run("round_trip", func(b *testing.B) {
		for range b.N {
			if _, err := f.st.Pool().Exec(ctx, `SELECT 1`); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("commit", func(b *testing.B) {
		for range b.N {
			if _, err := f.st.Pool().Exec(ctx, `BEGIN; SELECT pg_current_xact_id(); COMMIT`); err != nil {
				b.Fatal(err)
			}
		}
		perSecond(b)
	})
	b.Run("batch_256", func(b *testing.B) {
		for done := 0; done < b.N; done += 256 {
			reqs := make([]store.OutcomeRequest, min(256, b.N-done))
			for i := range reqs {
				reqs[i] = f.next()
			}
			for _, a := range f.st.RecordOutcomes(ctx, reqs) {
				if a.Err != nil {
					b.Fatal(a.Err)
				}
			}
		}
		perSecond(b)
	})
}

func newIngestFixture(b testing.TB) *ingestFixture {
	ctx := context.Background()
	st := pgtest.New(b)
	fatal := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	fatal(err)
	node, _, err := st.CreateNode(ctx, sh.ID, "node1")
	fatal(err)
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "acme", ShardID: sh.ID, LinuxUser: "acme", LinuxGroup: "acme"})
	fatal(err)
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/acme/public")
	fatal(err)
	f := &ingestFixture{st: st, node: node, base: time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -150)}
	for range 200 {
		j, _, err := st.CreateJob(ctx, tn.ID, store.JobFields{WebrootID: wr.ID, Schedule: "* * * * *", Timezone: "UTC",
			Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64}, nil)
		fatal(err)
		f.jobs = append(f.jobs, j)
	}
	fatal(seedIngestHistory(ctx, st, f.base, historyRuns(b)))
	return f
}

// ingestHistoryRuns is the history each job has before the benchmark's
// outcomes: a run every 4 hours before base, one in seven a failure, so
// that the history holds 100,000 runs over 83 days, in months of their
// own as in production (migration 027 creates only the current month and
// 3 ahead for an empty history: without the past months every run would
// sit in the default partition). HOSTCRON_BENCH_HISTORY_RUNS sets
// another number (0: an empty history, as before the fixture had one).
const ingestHistoryRuns = 500

func historyRuns(b testing.TB) int {
	v := os.Getenv("HOSTCRON_BENCH_HISTORY_RUNS")
	if v == "" {
		return ingestHistoryRuns
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("HOSTCRON_BENCH_HISTORY_RUNS=%q: want a number of runs", v)
	}
	return n
}

// seedIngestHistory creates the monthly partitions from the oldest
// seeded slot up to now and fills them with every job's history, so that
// a lookup by run key alone probes as many months as it would at the
// default retention (docs/benchmarks.md, "Outcome ingestion: run lookups
// that name the slot").
func seedIngestHistory(ctx context.Context, st *store.Store, base time.Time, runs int) error {
	if runs == 0 {
		return nil
	}
	first := base.Add(-time.Duration(runs) * 4 * time.Hour)
	month := time.Date(first.Year(), first.Month(), 1, 0, 0, 0, 0, time.UTC)
	now := time.Now().UTC()
	for ; month.Before(now); month = month.AddDate(0, 1, 0) {
		name := "cron_job_runs_" + month.Format("2006_01")
		_, err := st.Pool().Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
			IF to_regclass('%s') IS NULL THEN
				CREATE TABLE %s PARTITION OF cron_job_runs FOR VALUES FROM ('%s') TO ('%s');
			END IF; END $$`, name, name, month.Format(time.RFC3339), month.AddDate(0, 1, 0).Format(time.RFC3339)))
		if err != nil {
			return fmt.Errorf("seed history: partition %s: %w", name, err)
		}
	}
	_, err := st.Pool().Exec(ctx, `
		INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, trigger)
		SELECT j.id || '#scheduled#' || to_char(s.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), j.id, j.version,
		       s.at, s.at, s.at + interval '1 second', 1000,
		       CASE WHEN s.k % 7 = 0 THEN 'exit_code' ELSE 'success' END, CASE WHEN s.k % 7 = 0 THEN 1 ELSE 0 END, 'scheduled'
		FROM cron_jobs j, LATERAL (SELECT k, $1::timestamptz - k * interval '4 hours' AS at
		                           FROM generate_series($2::int, 1, -1) k) s
		ORDER BY s.at, j.id`, base, runs)
	if err != nil {
		return fmt.Errorf("seed history: runs: %w", err)
	}
	if _, err = st.Pool().Exec(ctx, `ANALYZE cron_job_runs; ANALYZE cron_jobs`); err != nil {
		return fmt.Errorf("seed history: analyze: %w", err)
	}
	return nil
}

// ingestFixture is a store with 200 active jobs of one tenant.
type ingestFixture struct {
	st   *store.Store
	node store.Node
	jobs []store.CronJob
	seq  atomic.Int64 // the next slot, in seconds from base
	base time.Time
}

func (f *ingestFixture) next() store.OutcomeRequest {
	i := f.seq.Add(1)
	j := f.jobs[int(i)%len(f.jobs)]
	slot := f.base.Add(time.Duration(i) * time.Second)
	result := wire.ResultSuccess
	if i%7 == 0 {
		result = wire.ResultExitCode
	}
	started, finished := slot, slot.Add(time.Second)
	return store.OutcomeRequest{Node: f.node, JobID: j.ID, Outcome: store.Outcome{RunKey: runkey.Scheduled(j.ID, slot),
		Version: j.Version, ScheduledAt: slot, StartedAt: &started, FinishedAt: &finished, Result: result}}
}

// concurrently records n outcomes from c callers with record.
func (f *ingestFixture) concurrently(b *testing.B, n, c int, record func(store.OutcomeRequest) error) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := record(f.next()); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
