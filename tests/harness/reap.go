//go:build e2e

package harness

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// runDir is where runs of the harness keep their directories.
const runDir = "/run"

// controlPlaneRecord is the file in a run's base directory that names its
// control-plane address, so a reaper can remove it from lo.
const controlPlaneRecord = "control-plane"

// claimRun reaps what dead runs left (reapLocked) and claims base for
// this run: it makes the directory and holds an flock on it for as long
// as the returned file stays open (Stop closes it; the kernel, when the
// process dies). Both under the reap lock, so a reaper never sees a live
// run's directory before its lock.
func claimRun(repo, base string) (*os.File, error) {
	unlock, err := reapLock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	reapLocked(repo)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, fmt.Errorf("claim %s: %w", base, err)
	}
	f, err := lockRun(base)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", base, err)
	}
	return f, nil
}

// lockRun takes the flock on a run's base directory without waiting: an
// error wrapping syscall.EWOULDBLOCK if a live run holds it. The lock
// stands while the returned file is open.
func lockRun(base string) (*os.File, error) {
	f, err := os.Open(base)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", base, err)
	}
	return f, nil
}

// ReapStale tears down what earlier runs of the harness left when their
// teardown never ran (a test binary killed with SIGKILL, a machine
// stopped mid-run): a run whose base directory nobody holds (claimRun)
// is over. Start reaps before it claims its own directory; the e2e tier
// calls this to test it.
func ReapStale(repo string) error {
	unlock, err := reapLock()
	if err != nil {
		return err
	}
	defer unlock()
	reapLocked(repo)
	return nil
}

// reapLock serializes reapers and claims across the tiers that start side
// by side.
func reapLock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(runDir, runPrefix+"reap.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("reap lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("reap lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// reapLocked reaps every dead run. A reap that fails is reported, not
// returned: a dead run's leftovers never collide with a new run's
// directories, and one that cannot be removed must not stop every tier
// on the host from starting.
func reapLocked(repo string) {
	entries, err := os.ReadDir(runDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "harness: reap stale runs: %v\n", err)
		return
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	for _, pid := range staleRuns(names, runHeld) {
		base := filepath.Join(runDir, fmt.Sprintf("%s%d", runPrefix, pid))
		fmt.Fprintf(os.Stderr, "harness: reaping %s (nobody holds it: its run ended without its teardown)\n", base)
		if err := reap(repo, base, names); err != nil {
			fmt.Fprintf(os.Stderr, "harness: reap %s: %v\n", base, err)
		}
	}
}

// runHeld says whether the run of pid holds its base directory. flock
// locks belong to an open file, so a cluster of this very process holds
// its own against this open too. No base directory: nobody holds it.
func runHeld(pid int) bool {
	f, err := lockRun(filepath.Join(runDir, fmt.Sprintf("%s%d", runPrefix, pid)))
	if err == nil {
		f.Close()
	}
	return errors.Is(err, syscall.EWOULDBLOCK)
}

// reap tears one dead run down: its nodes first (their nspawn named by
// their pid files; killing processes that name the run's paths first
// would kill the nspawns and leave their nodes running), then its
// PostgreSQL, its control-plane address, any process still naming its
// paths (Temporal, Loki), and its directories. Every step is tried
// whatever the others did.
func reap(repo, base string, names []string) error {
	var errs []error
	ip, hasIP := recordedControlPlane(base) // read now: nodes.sh down removes base
	down := exec.Command(filepath.Join(repo, "scripts/nodes.sh"), "down")
	// KEEP_NSPAWN_TMPFS: the tmpfs is every cluster's; one starting now
	// may not have populated it yet.
	down.Env = append(os.Environ(), "NODES_DIR="+base, "SHARED="+base+"-shared", "KEEP_NSPAWN_TMPFS=1")
	if out, err := down.CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("nodes.sh down: %v\n%s", err, out))
	}
	stopPostgres(repo, base+"-pg")
	if hasIP {
		_ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "lo").Run()
	}
	killNaming(base + "-")
	prefix := filepath.Base(base)
	for _, n := range names {
		if n == prefix || strings.HasPrefix(n, prefix+"-") {
			if err := os.RemoveAll(filepath.Join(runDir, n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// recordedControlPlane is the control-plane address a run recorded, if it
// is one the harness hands out (setupControlPlane: inside 198.18.0.0/15).
func recordedControlPlane(base string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(base, controlPlaneRecord))
	if err != nil {
		return "", false
	}
	ip, err := netip.ParseAddr(strings.TrimSpace(string(b)))
	if err != nil || !netip.MustParsePrefix("198.18.0.0/15").Contains(ip) {
		return "", false
	}
	return ip.String(), true
}

// stopPostgres stops a dead run's private PostgreSQL in dir, if its
// postmaster still runs: only the process whose command line names dir
// (after a restart the PID in postmaster.pid may be anyone's, even the
// shared test cluster's postmaster).
func stopPostgres(repo, dir string) {
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return
	}
	first, _, _ := strings.Cut(string(pidFile), "\n")
	cmdline, err := os.ReadFile("/proc/" + strings.TrimSpace(first) + "/cmdline")
	if err != nil || !cmdlineNames(cmdline, dir) {
		return
	}
	if out, err := exec.Command(filepath.Join(repo, "scripts/pg.sh"), "stop", dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: stop %s: %v\n%s", dir, err, out)
	}
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
		if err == nil && cmdlineNames(cmdline, prefix) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
