package runner

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A node whose runtime dir cannot take the record (/run full or read-only)
// must not run the slot: its outcome hook would find no record and report
// nothing, so a real run would be hidden (the core records it lost). It
// must not touch shared storage either, so another node runs the slot.
func TestNoRecordNoRun(t *testing.T) {
	env, locks := setup(t, "touch ran")
	bad := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(bad, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := env
	broken.RuntimeDir = filepath.Join(bad, "run") // ENOTDIR: no record can be written
	if code := Run(broken); code == 0 || code == ExitSkip || ran(t, broken) {
		t.Fatalf("exit %d, ran=%v: a node that cannot record its run ran it", code, ran(t, broken))
	}
	if _, err := os.Stat(filepath.Join(locks, "cron-"+id+".slot")); err == nil {
		t.Fatal("the node that cannot record stamped the slot: no other node will run it")
	}
	other := otherNode(t, env, "node2", env.Now().Add(2*time.Second))
	if code := Run(other); code != 0 || !ran(t, other) || record(t, other).Kind != KindRan {
		t.Fatalf("node2 exit %d: the slot did not run on a healthy node", code)
	}
}

// A node whose clock is more than MaxSkew behind reads a correct stamp as
// "corrupt, in the future" and overwrites it with its own (older) slot:
// the stamp goes backwards, and a correct node that fires the same slot a
// few seconds later (RandomizedDelaySec) runs it a second time.
func TestSlowClockNodeDoesNotRewindStamp(t *testing.T) {
	t.Skip("open: a stamp ahead of MaxSkew is overwritten by design (docs/semantics.md, Clocks); see review finding")
	now := time.Date(2026, 11, 21, 12, 0, 2, 0, time.UTC)
	env, _ := setupWith(t, "echo x >> ran", "0 * * * * *", now) // node1 runs 12:00 at 12:00:02
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	slow := otherNode(t, env, "slow", now.Add(-11*time.Minute)) // its clock says 11:49:02: fires 11:49
	Run(slow)
	late := otherNode(t, env, "node2", now.Add(10*time.Second)) // correct clock, larger random delay
	if code := Run(late); code != ExitSkip {
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(env.SpecPath)), filepath.Base(filepath.Dir(env.SpecPath)), "www", "ran"))
		t.Fatalf("12:00 ran twice (exit %d, webroot ran=%q)", code, b)
	}
}
