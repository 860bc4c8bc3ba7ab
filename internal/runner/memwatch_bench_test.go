package runner

import (
	"os"
	"strconv"
	"testing"
)

// The cost of one sample of the memory watch, for the figure its pause
// is chosen by (watchInterval, docs/semantics.md "Memory limits"):
// reading smaps_rollup walks the process's page tables, so its cost grows
// with the resident size; the status file costs the same whatever the
// size. Each is measured on this process with 1 GiB (or, with -short,
// 64 MiB) resident and touched:
//
//	go test -run '^$' -bench BenchmarkSample ./internal/runner/
func BenchmarkSampleSmapsRollup(b *testing.B) { benchmarkProcFile(b, "smaps_rollup") }
func BenchmarkSampleStatus(b *testing.B)      { benchmarkProcFile(b, "status") }

// resident keeps the benchmark's memory mapped and touched.
var resident []byte

func benchmarkProcFile(b *testing.B, name string) {
	size := 1 << 30
	if testing.Short() {
		size = 64 << 20
	}
	if len(resident) != size {
		resident = make([]byte, size)
		for i := 0; i < size; i += 4096 {
			resident[i] = 1
		}
	}
	path := "/proc/" + strconv.Itoa(os.Getpid()) + "/" + name
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size>>20), "MiB-resident")
}
