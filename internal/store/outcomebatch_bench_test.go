package store_test

import (
	"context"
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
// failure, as scripts/bench/outcomes): distinct run keys, b.N outcomes
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
	return f
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
