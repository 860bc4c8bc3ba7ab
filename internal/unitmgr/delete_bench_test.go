package unitmgr

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/hostcron/hostcron/internal/jobspec"
)

// BenchmarkDeleteAll: a converge that deletes every job of a node
// (BENCH_DELETE_JOBS, 2,000 by default), as a shard's mass delete does:
// each job's spec is kept for the runs under way (jobspec.KeepReplaced)
// and the kept specs are pruned, once per batch.
func BenchmarkDeleteAll(b *testing.B) {
	n := envCount("BENCH_DELETE_JOBS", 2000)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		m, _ := testManager(b)
		if _, err := m.Reconcile(ctx, pagedSet(n)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := m.Reconcile(ctx, pagedSet(0)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		kept, err := os.ReadDir(filepath.Join(m.layout.Paths.SpecDir, jobspec.PreviousDir))
		if err != nil || len(kept) != n {
			b.Fatalf("%d specs kept (%v), want %d", len(kept), err, n)
		}
	}
}
