package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/wire"
)

// BenchmarkNodeDesiredDigest: what the converge fast path's question
// costs the core at 10,000 jobs on one shard (seeded as BenchmarkScale
// seeds): NodeDesiredDigest when the set changed since it was last asked
// (digest) and when it did not (digest_cached), against the full read it
// saves,
// every page of 500 read and JSON encoded as the API serves it (pages).
// Custom metric: µs/job.
func BenchmarkNodeDesiredDigest(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	db, err := pgtest.Create(ctx, "hc_digest", 10)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Drop)
	st := db.Store
	seeded := seedScale(b, st, n, time.Now().Add(-time.Hour))
	digest := func(b *testing.B, cached bool) {
		b.ReportAllocs()
		st.ForgetDigests()
		if cached {
			if _, _, err := st.NodeDesiredDigest(ctx, seeded.node.ID); err != nil {
				b.Fatal(err)
			}
		}
		misses := st.DigestMisses()
		for b.Loop() {
			if !cached {
				st.ForgetDigests()
			}
			d, ok, err := st.NodeDesiredDigest(ctx, seeded.node.ID)
			if err != nil || !ok || d.Jobs != n {
				b.Fatalf("digest %+v, ok %v, %v", d, ok, err)
			}
		}
		if cached && st.DigestMisses() != misses {
			b.Fatalf("%d digests computed, want every one from the cache", st.DigestMisses()-misses)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/job")
	}
	// digest: the set changed since the last digest (the key, then the
	// full read); digest_cached: it did not (the key alone).
	b.Run("digest", func(b *testing.B) { digest(b, false) })
	b.Run("digest_cached", func(b *testing.B) { digest(b, true) })
	b.Run("pages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			after, jobs := "", 0
			for {
				p, _, err := st.NodeDesiredPage(ctx, seeded.node.ID, after, wire.DesiredPageSize)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(p); err != nil {
					b.Fatal(err)
				}
				jobs += len(p.Jobs)
				if p.Next == "" {
					break
				}
				after = p.Next
			}
			if jobs != n {
				b.Fatalf("%d jobs, want %d", jobs, n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/job")
	})
}
