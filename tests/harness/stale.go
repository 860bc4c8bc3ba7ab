package harness

import (
	"slices"
	"strconv"
	"strings"
)

// runPrefix names what a run of the harness keeps under /run: its base
// directory /run/hostcron-e2e-PID and siblings PID-shared, PID-bin, ...
const runPrefix = "hostcron-e2e-"

// staleRuns picks, from the names of /run's entries, the PIDs of harness
// runs that are over without their teardown: no test binary of that PID
// runs (the binary was killed with SIGKILL, or the machine stopped; no
// signal handler or timeout teardown ran), or the PID is this process's
// own and it has not started a cluster yet (PIDs come round again, after
// a restart soon). Sorted, each once.
//
// This file has no build tag, so the unit tier tests it.
func staleRuns(names []string, self int, testBinaryRuns func(pid int) bool) []int {
	var pids []int
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, runPrefix)
		if !ok {
			continue
		}
		digits, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		if err != nil || pid <= 0 || strconv.Itoa(pid) != digits {
			continue // not ours: hostcron-e2e-reap.lock, or a name we never make
		}
		if pid == self || !testBinaryRuns(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// isTestBinary says whether the command line of a process (the NUL
// separated /proc/PID/cmdline) is a Go test binary's, as every run of
// the harness is (go test runs pkg.test).
func isTestBinary(cmdline []byte) bool {
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return strings.HasSuffix(argv0, ".test")
}
