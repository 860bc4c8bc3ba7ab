package unitmgr

import (
	"context"
	"testing"
)

// BenchmarkFastPathFileState: the file half of the fast path's
// fingerprint on a node of benchJobs() converged jobs (three files each
// and an enable link): what it costs to stat them, without systemd.
func BenchmarkFastPathFileState(b *testing.B) {
	m, _ := testManager(b)
	m.fast.inputs = []string{"/etc/passwd"}
	if _, err := m.Reconcile(context.Background(), pagedSet(benchJobs())); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := m.fileState(); err != nil {
			b.Fatal(err)
		}
	}
}
