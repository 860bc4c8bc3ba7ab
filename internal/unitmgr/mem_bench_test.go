package unitmgr

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// benchJobs is the size of the in-process converge benchmarks
// (BENCH_RECONCILE_JOBS, default 10,000: issue 16's timers per node).
func benchJobs() int { return envCount("BENCH_RECONCILE_JOBS", 10000) }

// envCount is the positive count in the environment variable name, else def.
func envCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// pagedSet is a desired set of n jobs as desiredset.Assemble makes it:
// ids ascending, pages of wire.DesiredPageSize, each page's range with
// its snapshot.
func pagedSet(n int) wire.DesiredSet {
	set := wire.DesiredSet{Snapshot: testSnap}
	for i := 0; i < n; i++ {
		set.Jobs = append(set.Jobs, job(fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), rev(50)))
		if (i+1)%wire.DesiredPageSize == 0 && i+1 < n {
			set.Pages = append(set.Pages, wire.PageSnapshot{Last: set.Jobs[i].ID, Snapshot: testSnap})
		}
	}
	set.Pages = append(set.Pages, wire.PageSnapshot{Snapshot: testSnap})
	return set
}

// peakHeap samples the heap in use every millisecond until stop is
// called, and returns the highest it saw (bytes): what the agent's RSS
// follows, garbage not yet collected included.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > peak.Load() {
			peak.Store(ms.HeapInuse)
		}
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		sample()
		return peak.Load()
	}
}

// liveHeap collects garbage and returns the heap objects left (bytes,
// runtime/metrics): the live heap at the moment of the call.
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReconcileMemory: a new node's reconcile of a paged set of
// BENCH_RECONCILE_JOBS jobs onto empty directories (fake systemd), then
// the same reconcile with nothing changed; each reports the peak heap in
// use during the reconcile (peak-heap-MB), which is what bounds the
// agent's RSS, the heap in use before it, the desired set's share
// (set-heap-MB), and its CPU time (cpu-ms/op; wall time is noise on a
// shared machine).
func BenchmarkReconcileMemory(b *testing.B) {
	n := benchJobs()
	for _, mode := range []string{"first", "noop"} {
		// No "=" in the name: b.TempDir() takes it, and a unit path with
		// one is refused (units.ValidPath), which once made every job of
		// this benchmark fail to render and it measured nothing.
		b.Run(fmt.Sprintf("%s/jobs-%d", mode, n), func(b *testing.B) {
			var peak, base, live uint64
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				m, _ := testManager(b)
				set := pagedSet(n)
				if mode == "noop" {
					if _, err := m.Reconcile(context.Background(), set); err != nil {
						b.Fatal(err)
					}
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				base = max(base, ms.HeapInuse)
				b.StartTimer()
				stop := peakHeap()
				cpu0 := cpuTime()
				rep, err := m.Reconcile(context.Background(), set)
				cpu += cpuTime() - cpu0
				p := stop()
				if live == 0 {
					// Once more, for the live heap at the plan's peak: what
					// the agent's heap cannot go below, whatever the
					// collector's pace (a 1 ms sampler of HeapInuse may
					// miss it, and counts garbage).
					m, _ := testManager(b)
					if mode == "noop" {
						if _, err := m.Reconcile(context.Background(), set); err != nil {
							b.Fatal(err)
						}
					}
					planned = func() { live = liveHeap() }
					_, err := m.Reconcile(context.Background(), set)
					planned = func() {}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				if len(rep.Failed) > 0 {
					b.Fatalf("%d jobs failed, e.g. %s", len(rep.Failed), rep.Failed[0])
				}
				if mode == "first" && (len(rep.Written) != 2*n || len(rep.Specs) != n) {
					b.Fatalf("first reconcile wrote %d unit files and %d specs, want %d and %d", len(rep.Written), len(rep.Specs), 2*n, n)
				}
				if mode == "noop" && (len(rep.Written) > 0 || len(rep.Specs) > 0 || rep.Reloads > 0) {
					b.Fatalf("no-op reconcile changed something: %d written, %d specs, %d reloads", len(rep.Written), len(rep.Specs), rep.Reloads)
				}
				peak = max(peak, p)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(base)/(1<<20), "set-heap-MB")  // before the reconcile: the set and the test's own
			b.ReportMetric(float64(live)/(1<<20), "plan-live-MB") // after a full GC once the steps are made (set, observation, intents, steps)
			// CPU time, not wall time, is what compares on a shared machine.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}
