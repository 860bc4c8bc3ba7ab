//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/tests/harness"
)

// A run whose test binary was killed without its teardown (SIGKILL, a
// machine stopped mid-run) leaves a booted node (here with its nspawn
// killed too, so only the node's cgroup still finds its systemd), the
// node's overlay mount, an nspawn.pid that may by now be anyone's, its
// Temporal running, its control-plane address on lo and its directories. The next run's harness reaps all
// of it, and nothing of a run that is alive: not this tier's own cluster,
// not the process the stale nspawn.pid names.
func TestHarnessReapsStaleRuns(t *testing.T) {
	// A PID nobody else can have while the test runs: a child that has
	// exited, a zombie until the cleanup waits for it.
	gone := exec.Command("true")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gone.Wait() })
	base := fmt.Sprintf("/run/hostcron-e2e-%d", gone.Process.Pid)
	// Held while it is built, so no tier starting beside reaps it half
	// made; let go right before the reap: a run nobody holds.
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	hold, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if err := syscall.Flock(int(hold.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// nodes.sh for the dead run's nodes (the shared nspawn tmpfs kept:
	// this tier's own and its siblings' nodes use it).
	nodesSh := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(c.Repo, "scripts/nodes.sh"), args...)
		cmd.Env = append(os.Environ(), "NODES_DIR="+base, "SHARED="+base+"-shared", "KEEP_NSPAWN_TMPFS=1")
		return cmd
	}
	nodes := func(args ...string) string {
		t.Helper()
		out, err := nodesSh(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("nodes.sh %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Cleanup(func() { // whatever the reap left, should it fail
		_ = nodesSh("down").Run()
		for _, d := range []string{base, base + "-shared", base + "-bin"} {
			os.RemoveAll(d)
		}
	})
	nodes("up", "1")
	leader, err := strconv.Atoi(nodes("pid", "node1"))
	if err != nil {
		t.Fatal(err)
	}
	nspawn, err := os.ReadFile(filepath.Join(base, "node1", "nspawn.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("kill", "-KILL", strings.TrimSpace(string(nspawn))).Run(); err != nil {
		t.Fatal(err)
	}
	if !running(leader) {
		t.Fatalf("premise: the node's systemd (PID %d) runs on after its nspawn is killed", leader)
	}
	// A second node's stale nspawn.pid names this test binary: it must
	// not be killed.
	if err := os.MkdirAll(filepath.Join(base, "node2", "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "node2", "nspawn.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(base+"-bin", 0o755); err != nil {
		t.Fatal(err)
	}
	// Its control-plane address, on lo and recorded (setupControlPlane).
	const ip = "198.19.255.253"
	if out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "lo").Run() })
	if err := os.WriteFile(filepath.Join(base, "control-plane"), []byte(ip+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The dead run's Temporal, as a process naming its directory.
	temporal := exec.Command("bash", "-c", `exec -a "$0" sleep 300`, base+"-bin/temporal-dev")
	if err := temporal.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- temporal.Wait() }()
	t.Cleanup(func() { _ = temporal.Process.Kill() })

	hold.Close()
	if err := harness.ReapStale(c.Repo); err != nil {
		t.Fatal(err)
	}

	for _, d := range []string{base, base + "-shared", base + "-bin"} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", d, err)
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mounts), base+"/") {
		t.Errorf("a mount under %s is left (%v)", base, err)
	}
	if out, err := exec.Command("ip", "-o", "addr", "show", "dev", "lo").CombinedOutput(); err != nil || strings.Contains(string(out), " "+ip+"/") {
		t.Errorf("the dead run's control-plane address %s is still on lo (%v)", ip, err)
	}
	if running(leader) {
		t.Errorf("the dead run's node's systemd (PID %d) still runs", leader)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the dead run's Temporal ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the dead run's Temporal still runs")
	}
	// This tier's own cluster, alive, is untouched.
	if _, err := os.Stat(fmt.Sprintf("/run/hostcron-e2e-%d", os.Getpid())); err != nil {
		t.Errorf("this run's directory: %v", err)
	}
	if out, err := c.Exec("node1", nil, "true"); err != nil {
		t.Errorf("this run's node1 after the reap: %v\n%s", err, out)
	}
}

// running says whether pid is a process that has not exited (a zombie
// no parent has reaped yet has).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}
