//go:build e2e

package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runDir is where runs of the harness keep their directories.
const runDir = "/run"

// ReapStale tears down what earlier runs of the harness left when their
// teardown never ran (staleRuns: a test binary killed with SIGKILL, a
// machine stopped mid-run): the processes that name the run's
// directories (its Temporal, Loki), its private PostgreSQL, its nodes
// with their overlay mounts and cgroups (nodes.sh down), and the
// directories. Start calls it first, so a killed run costs the next one
// a few seconds instead of leaking for good. Runs side by side take
// turns (a lock file), and a live run's leftovers are never touched.
func ReapStale(repo string) error {
	lock, err := os.OpenFile(filepath.Join(runDir, runPrefix+"reap.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("reap stale runs: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("reap stale runs: lock: %w", err)
	}
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return fmt.Errorf("reap stale runs: %w", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// Our own PID's directories are stale only before this process has
	// a cluster (a PID come round again); once it has one they are its.
	self := os.Getpid()
	live.Lock()
	if len(live.clusters) > 0 {
		self = 0
	}
	live.Unlock()
	for _, pid := range staleRuns(names, self, testBinaryRuns) {
		base := filepath.Join(runDir, fmt.Sprintf("%s%d", runPrefix, pid))
		fmt.Fprintf(os.Stderr, "harness: reaping %s (its test binary is gone without its teardown)\n", base)
		if err := reap(repo, base, names); err != nil {
			return fmt.Errorf("reap %s: %w", base, err)
		}
	}
	return nil
}

// testBinaryRuns says whether pid is a running Go test binary.
func testBinaryRuns(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && isTestBinary(cmdline)
}

func reap(repo, base string, names []string) error {
	if _, err := os.Stat(base + "-pg"); err == nil {
		if out, err := exec.Command(filepath.Join(repo, "scripts/pg.sh"), "stop", base+"-pg").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "harness: stop %s-pg: %v\n%s", base, err, out)
		}
	}
	killNaming(base + "-")
	down := exec.Command(filepath.Join(repo, "scripts/nodes.sh"), "down")
	down.Env = append(os.Environ(), "NODES_DIR="+base, "SHARED="+base+"-shared")
	if out, err := down.CombinedOutput(); err != nil {
		return fmt.Errorf("nodes.sh down: %v\n%s", err, out)
	}
	prefix := filepath.Base(base)
	for _, n := range names {
		if n == prefix || strings.HasPrefix(n, prefix+"-") {
			if err := os.RemoveAll(filepath.Join(runDir, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// killNaming kills every process whose command line names a path under
// prefix: a dead run's Temporal and Loki, which outlive a test binary
// killed with SIGKILL.
func killNaming(prefix string) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), prefix) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
