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
// runs that are over without their teardown (a test binary killed with
// SIGKILL, the machine stopped mid-run: no signal handler or timeout
// teardown ran). A run is alive while its process holds the lock on its
// base directory (held), whatever its binary is called and whoever has
// its PID now. Sorted, each once.
//
// This file has no build tag, so the unit tier tests it.
func staleRuns(names []string, held func(pid int) bool) []int {
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
		if !held(pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// cmdlineNames says whether a process's command line (the NUL separated
// /proc/PID/cmdline) contains s: whether a PID read from a file is still
// the process that wrote it, and not whoever has it after a restart.
func cmdlineNames(cmdline []byte, s string) bool {
	return s != "" && strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), s)
}
