//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestCatchUp: a two-minute job with a catch-up window of 60 s on three
// nodes (Persistent=yes). (1) Its timers stopped on every node across a
// slot and started 45 s after it: systemd fires the missed slot, which
// runs exactly once on the shard, with trigger catchup, under the slot's
// own key. (2) Started 75 s after the next slot, past the window: the fire
// comes and runs nothing. (3) Stopped on one node only across a slot the
// others ran on time: that node's catch-up fire finds the slot stamped and
// runs nothing, so the slot has one run, trigger scheduled.
func TestCatchUp(t *testing.T) {
	const window = 60
	job := c.NewJob(t, "acme", "*/2 * * * *",
		`echo "$(hostname) $HOSTCRON_RUN_KEY $HOSTCRON_TRIGGER" >> catchup-witness.log`, 60, 64, 5)
	if _, err := c.Store.Pool().Exec(t.Context(), `UPDATE cron_jobs SET catchup_window_seconds = $2 WHERE id = $1`, job.ID, window); err != nil {
		t.Fatal(err)
	}
	job.CatchUpWindowSec = window
	witness := filepath.Join(c.Shared, "www/acme/public/catchup-witness.log")
	for _, n := range c.Nodes {
		c.Agent(t, n, []wire.Job{job}, nil, "apply")
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			c.Agent(t, n, nil, nil, "remove", job.UnitName())
		}
	})
	timer := job.UnitName() + ".timer"
	if out, err := c.Exec("node1", nil, "systemctl", "show", "-P", "Persistent", timer); err != nil || strings.TrimSpace(out) != "yes" {
		t.Fatalf("timer Persistent=%q (%v), want yes for a job with a catch-up window", out, err)
	}
	timers := func(action string, nodes ...string) {
		t.Helper()
		for _, n := range nodes {
			if out, err := c.Exec(n, nil, "systemctl", action, timer); err != nil {
				t.Fatalf("%s: systemctl %s %s: %v %s", n, action, timer, err, out)
			}
		}
	}
	// nextSlot is the first slot at least 20 s away, so a stop before it
	// is surely before its fire.
	nextSlot := func() time.Time {
		s := time.Now().UTC().Truncate(2 * time.Minute).Add(2 * time.Minute)
		if time.Until(s) < 20*time.Second {
			s = s.Add(2 * time.Minute)
		}
		return s
	}
	sleepUntil := func(at time.Time) { time.Sleep(time.Until(at)) }
	executions := func(slot time.Time) (n int, triggers []string) {
		key := runkey.Scheduled(job.ID, slot)
		b, _ := os.ReadFile(witness)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[1] == key {
				n++
				triggers = append(triggers, f[2])
			}
		}
		return n, triggers
	}
	runOf := func(slot time.Time, runs []store.Run) []store.Run {
		var out []store.Run
		for _, r := range runs {
			if r.RunKey == runkey.Scheduled(job.ID, slot) {
				out = append(out, r)
			}
		}
		return out
	}

	// (1) Every node's timer stopped across s1, started 45 s late.
	s1 := nextSlot()
	timers("stop", c.Nodes...)
	sleepUntil(s1.Add(45 * time.Second))
	timers("start", c.Nodes...)
	runs := c.WaitRuns(t, job.ID, 90*time.Second, func(r []store.Run) bool { return len(runOf(s1, r)) > 0 })
	time.Sleep(10 * time.Second) // a second run, were there one, would have reported by now
	runs, _ = c.Store.ListRuns(t.Context(), job.ID, 1000)
	if got := runOf(s1, runs); len(got) != 1 || got[0].Result != wire.ResultSuccess || got[0].Trigger != wire.TriggerCatchUp {
		t.Errorf("slot %s missed by every node: runs %+v, want one success with trigger catchup", s1, got)
	}
	if n, trig := executions(s1); n != 1 || trig[0] != "catchup" {
		t.Errorf("slot %s executed %d times, HOSTCRON_TRIGGER %v; want once, catchup", s1, n, trig)
	}

	// (2) Stopped across s2, started 75 s late: older than the window.
	s2 := nextSlot()
	timers("stop", c.Nodes...)
	sleepUntil(s2.Add(75 * time.Second))
	since := fmt.Sprintf("@%d", time.Now().Unix())
	timers("start", c.Nodes...)
	fired := 0
	deadline := time.Now().Add(30 * time.Second)
	for fired < len(c.Nodes) && time.Now().Before(deadline) {
		fired = 0
		for _, n := range c.Nodes {
			out, _ := c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "cat", "--since", since, "-u", job.UnitName()+".service")
			if strings.Contains(out, "older than its catch-up window") {
				fired++
			}
		}
		time.Sleep(time.Second)
	}
	if fired != len(c.Nodes) {
		t.Errorf("%d of %d nodes refused slot %s as older than the window: the persistent timers did not fire it", fired, len(c.Nodes), s2)
	}
	runs, _ = c.Store.ListRuns(t.Context(), job.ID, 1000)
	for _, r := range runOf(s2, runs) {
		if r.Result != wire.ResultLost {
			t.Errorf("slot %s, older than the window, recorded %s (%s)", s2, r.Result, r.Trigger)
		}
	}
	if n, _ := executions(s2); n != 0 {
		t.Errorf("slot %s, older than the window, executed %d times", s2, n)
	}

	// (3) node1's timer stopped across s3, which the others run on time;
	// started 45 s late, its catch-up fire finds the slot stamped.
	s3 := nextSlot()
	timers("stop", "node1")
	sleepUntil(s3.Add(45 * time.Second))
	since = fmt.Sprintf("@%d", time.Now().Unix())
	timers("start", "node1")
	started := false
	for deadline := time.Now().Add(30 * time.Second); !started && time.Now().Before(deadline); time.Sleep(time.Second) {
		out, _ := c.Exec("node1", nil, "journalctl", "-q", "--no-pager", "-o", "cat", "--since", since, "_PID=1", "UNIT="+job.UnitName()+".service")
		started = strings.Contains(out, "Finished") || strings.Contains(out, "Deactivated")
	}
	if !started {
		t.Errorf("node1's persistent timer did not fire slot %s when started again", s3)
	}
	time.Sleep(10 * time.Second)
	runs, _ = c.Store.ListRuns(t.Context(), job.ID, 1000)
	if got := runOf(s3, runs); len(got) != 1 || got[0].Result != wire.ResultSuccess || got[0].Trigger != wire.TriggerScheduled {
		t.Errorf("slot %s run on time while node1 was stopped: runs %+v, want one success with trigger scheduled", s3, got)
	}
	if n, trig := executions(s3); n != 1 || trig[0] != "scheduled" {
		t.Errorf("slot %s executed %d times (%v), want once, scheduled", s3, n, trig)
	}
}
