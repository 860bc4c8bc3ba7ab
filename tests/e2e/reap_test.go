//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/tests/harness"
)

// A run whose test binary was killed without its teardown (SIGKILL, a
// machine stopped mid-run) leaves its directories, a node's overlay
// mount, an nspawn.pid that may by now be anyone's, and its Temporal
// running. The next run's harness reaps all of it, and nothing of a run
// that is alive: not this tier's own cluster, not the process the stale
// nspawn.pid names.
func TestHarnessReapsStaleRuns(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("/run/hostcron-e2e-%d", gone.Process.Pid) // a PID no test binary has
	root := filepath.Join(base, "node1", "root")
	for _, d := range []string{root, base + "-shared/www", base + "-bin"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
		for _, d := range []string{base, base + "-shared", base + "-bin"} {
			os.RemoveAll(d)
		}
	})
	// The stale nspawn.pid names this test binary: it must not be killed.
	if err := os.WriteFile(filepath.Join(base, "node1", "nspawn.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
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

	if err := harness.ReapStale(c.Repo); err != nil {
		t.Fatal(err)
	}

	for _, d := range []string{base, base + "-shared", base + "-bin"} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", d, err)
		}
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
