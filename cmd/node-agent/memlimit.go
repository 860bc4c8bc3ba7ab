package main

import (
	"log/slog"
	"os"
	"runtime/debug"
	"time"
)

// defaultMemoryLimit is the daemon's soft memory limit (the Go runtime's,
// debug.SetMemoryLimit) unless GOMEMLIMIT sets another (issue 16: at most
// 50 MB at 10,000 timers). It is a complement, not the bound: a converge
// plans the whole set at once (its steps, and each file's size and hash,
// not its bytes: docs/benchmarks.md, "Node-agent memory: a plan of sums"),
// which the limit does not shrink; what the limit caps is the garbage
// between collections, which with the default GOGC of 100 may double the
// heap for a moment (a converge's D-Bus replies and rendered files are
// garbage at once). Below the limit GOGC paces
// the collector as usual, so an idle agent pays nothing for it; past it
// the collector runs more often rather than the heap growing. 40 MiB of
// Go memory leaves room under 50 MB for the binary's text the agent
// touches. A live heap above it (a node far beyond 10,000 timers) is not
// refused: the runtime caps the collector's share of CPU and lets the
// heap grow.
const defaultMemoryLimit = 40 << 20

// memoryLimit is the limit to set, or false when the environment set one
// (GOMEMLIMIT, which the runtime applied before main: an operator's
// drop-in wins).
func memoryLimit(env string) (int64, bool) {
	if env != "" {
		return 0, false
	}
	return defaultMemoryLimit, true
}

// setMemoryLimit applies memoryLimit to the daemon.
func setMemoryLimit(log *slog.Logger) {
	if limit, ok := memoryLimit(os.Getenv("GOMEMLIMIT")); ok {
		debug.SetMemoryLimit(limit)
		log.Info("memory limit", "bytes", limit, "from", "default")
		return
	}
	log.Info("memory limit", "from", "GOMEMLIMIT", "value", os.Getenv("GOMEMLIMIT"))
}

// releaseMemory collects the heap and hands every free page back to the
// system (debug.FreeOSMemory), a second after a converge returned, so
// that its set, its plan and its answer are garbage by then. A converge
// of 10,000 jobs leaves 20-30 MB of garbage and freed heap behind; the
// runtime's scavenger keeps Go's memory up to 95 % of the soft limit
// until a later collection lowers the heap goal (an idle agent collects
// every two minutes), so the agent's RSS stayed at 48-56 MB after a
// restarted agent's converge, against 31.5-33.5 MB with this
// (docs/benchmarks.md, "Node-agent RSS after a converge"). It costs one
// collection of a heap of a few tens of MB per converge, and the page
// faults of whatever the agent allocates again.
func releaseMemory() { time.AfterFunc(releaseAfter, debug.FreeOSMemory) }

// releaseAfter is how long releaseMemory waits after a converge.
const releaseAfter = time.Second
