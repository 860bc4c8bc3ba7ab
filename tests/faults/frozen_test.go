//go:build e2e

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// TestFrozenLockHolder (issue 11, scenario c, second half): the runner
// that holds a 10-second job's lock is frozen with SIGSTOP right after it
// took the lock and started the command, for about a minute, then thawed.
// docs/semantics.md (Election, rule 5): while the holder's lease is not
// released and its heartbeat is at most LeaseTTL old the other nodes skip
// a slot as an overlap; once the heartbeat is older, as
// platform_error "lock holder node X stopped heart-beating at T". So: the
// frozen runner's lease does not advance while it is stopped and is
// released once it runs again; no slot runs twice, and none while the lock
// is held; every slot of the freeze has one record, a skip or a platform
// error naming the frozen node and its last heartbeat, decided by the
// heartbeat's age; the job is not auto-disabled (max_failures 2), the
// frozen run's real outcome is recorded, and the slots after the thaw run.
func TestFrozenLockHolder(t *testing.T) {
	t.Parallel()
	const every = 10 * time.Second
	ctx := context.Background()
	marker := filepath.Join(c.Shared, "www/globex/public/frozen.log")
	job := c.NewJob(t, "globex", "*/10 * * * * *", harness.WitnessCommand("frozen.log", "sleep 4"), 120, 64, 2)
	unit := job.UnitName()
	stampPath := filepath.Join(c.Shared, "www/globex/.locks", wire.SlotStampName(job.ID))
	applyAll(t, job)
	t.Cleanup(func() { // after the thaw below (cleanups run last first), even on failure
		for _, n := range c.Nodes {
			c.Agent(t, n, nil, nil, "remove", unit)
		}
	})
	dumpOnFailure(t, unit)
	c.WaitRuns(t, job.ID, 60*time.Second, func(r []store.Run) bool { return countResult(r, wire.ResultSuccess) >= 1 })

	// The next run to start: its command has written the witness and
	// sleeps 4 s, so its runner holds the lock and its lease.
	before := len(harness.ReadWitness(t, marker))
	var frozen harness.Execution
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if execs := harness.ReadWitness(t, marker); len(execs) > before {
			frozen = execs[len(execs)-1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no run started within 30 s")
		}
	}
	node := frozen.Node
	if !slices.Contains(c.Nodes, node) {
		t.Fatalf("witness names node %q, not one of %v", node, c.Nodes)
	}
	out, err := c.Exec(node, nil, "systemctl", "show", "-p", "MainPID", "--value", unit+".service")
	pid, perr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || perr != nil || pid <= 0 {
		t.Fatalf("main PID of %s on %s: %q %v %v", unit, node, out, err, perr)
	}
	if comm, _ := c.Exec(node, nil, "cat", fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(comm) != "cron-run" {
		t.Fatalf("main PID %d of %s on %s is %q, not cron-run", pid, unit, node, comm)
	}
	thawed := false
	thaw := func() {
		if out, err := c.Exec(node, nil, "kill", "-CONT", strconv.Itoa(pid)); err != nil {
			t.Errorf("kill -CONT %d on %s: %v %s", pid, node, err, out)
		}
		thawed = true
	}
	t.Cleanup(func() {
		if !thawed {
			thaw()
		}
	})
	if out, err := c.Exec(node, nil, "kill", "-STOP", strconv.Itoa(pid)); err != nil {
		t.Fatalf("kill -STOP %d on %s: %v %s", pid, node, err, out)
	}
	frozenAt := time.Now()
	if s := procState(t, node, pid); s != "T" {
		t.Fatalf("cron-run %d on %s is in state %q after SIGSTOP, want T", pid, node, s)
	}
	lease := readLease(t, stampPath)
	if lease.Holder != node || lease.RunKey != frozen.Key.String() || lease.Released {
		t.Fatalf("stamp when frozen: %+v, want the unreleased lease of %s on %s (did the run end first?)", lease, frozen.Key, node)
	}
	hb := lease.Heartbeat
	t.Logf("froze cron-run %d on %s running %s; last heartbeat %s", pid, node, frozen.Key, hb.Format(time.RFC3339Nano))

	// Frozen for over a minute after its last heartbeat, thawed 5 s into a
	// slot (before any node's random delay of the next one is over).
	time.Sleep(time.Until(hb.Add(55 * time.Second)))
	untilNextSlot(every, 5*time.Second)
	if st := readLease(t, stampPath); st.RunKey != lease.RunKey || !st.Heartbeat.Equal(hb) || st.Released {
		t.Errorf("stamp while the holder was stopped: %+v, want its lease unchanged (heartbeat %s, not released)", st, hb)
	}
	if s := procState(t, node, pid); s != "T" {
		t.Errorf("cron-run %d on %s is in state %q before SIGCONT, want T", pid, node, s)
	}
	thawStart := time.Now() // decisions before it saw the holder stopped
	thaw()
	thawedAt := time.Now()
	// Released: the stamp shows the thawed run's lease released, or the
	// lease of a later slot written since the thaw. Stamps are written
	// under the flock, which the thawed runner held until its release, and
	// node2's own next start (queued behind the frozen one) takes the lock
	// and stamps its slot within milliseconds of that release, too fast
	// for a poll to see the released lease in between.
	released := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st := readLease(t, stampPath)
		if (st.RunKey == lease.RunKey && st.Released && st.Heartbeat.After(hb)) ||
			(st.Slot.After(lease.Slot) && st.Heartbeat.After(thawStart)) {
			released = true
			break
		}
	}
	if !released {
		t.Errorf("the thawed runner did not release its lease within 5 s: %+v", readLease(t, stampPath))
	}
	c.WaitRuns(t, job.ID, 60*time.Second, func(r []store.Run) bool {
		return countResult(r, wire.ResultSuccess, func(x store.Run) bool { return x.ScheduledAt.After(thawedAt) }) >= 2
	})
	j, err := c.Store.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	disableEverywhere(t, job.ID, 6*time.Second)
	if j.Status == wire.StatusAutoDisabled || !j.Enabled {
		t.Errorf("job is %s (enabled %v) after a frozen lock holder: skips or platform errors counted against the tenant", j.Status, j.Enabled)
	}

	execs := harness.ReadWitness(t, marker)
	runs := runsBySlot(t, job.ID)
	byKey := harness.CheckExactlyOnce(t, execs, runs)
	if r, ok := byKey[frozen.Key.String()]; !ok || r.Result != wire.ResultSuccess {
		t.Errorf("the frozen run %s is recorded as %+v, want its real outcome (success)", frozen.Key, r)
	}
	// No run can start while the lock is held: a slot whose fire window
	// closed before the thaw either ran before the freeze or not at all.
	window := time.Duration(units.DelayFor(every))*time.Second + runner.FireMargin
	during := func(slot time.Time) bool {
		return slot.After(frozen.Key.Slot) && slot.Add(window).Before(thawStart)
	}
	for _, e := range execs {
		if during(e.Key.Slot) {
			t.Errorf("%s ran on %s while the lock holder was frozen", e.Key, e.Node)
		}
	}
	holderDead := "lock holder node " + node + " stopped heart-beating at " + hb.UTC().Format(time.RFC3339)
	frozenSlots := 0
	for _, r := range runs {
		switch {
		case r.Result == wire.ResultPlatformError && (!strings.Contains(r.FailureReason, holderDead) || strings.HasPrefix(r.FailureReason, "node "+node+":")):
			t.Errorf("slot %s: platform_error %q, want another node naming %q", r.ScheduledAt.Format(time.RFC3339), r.FailureReason, holderDead)
		case r.Result == wire.ResultPlatformError && !r.ScheduledAt.After(frozen.Key.Slot):
			t.Errorf("slot %s before the freeze is a platform error: %s", r.ScheduledAt.Format(time.RFC3339), r.FailureReason)
		case during(r.ScheduledAt) && r.Result != wire.ResultOverlapSkipped && r.Result != wire.ResultPlatformError:
			t.Errorf("slot %s during the freeze is %s (%s), want overlap_skipped or platform_error", r.ScheduledAt.Format(time.RFC3339), r.Result, r.FailureReason)
		}
		if during(r.ScheduledAt) {
			frozenSlots++
		}
	}
	// Every slot from the first record to the last has exactly one (the
	// unique run key forbids more): none went unreported.
	if len(runs) > 0 {
		first, last := runs[0].ScheduledAt, runs[len(runs)-1].ScheduledAt
		if want := int(last.Sub(first)/every) + 1; len(byKey) != want {
			t.Errorf("%d run records for %d slots between %s and %s", len(byKey), want, first.Format(time.RFC3339), last.Format(time.RFC3339))
		}
	}
	// Each skip decision follows the age of the frozen heartbeat at the
	// moment it was made (the journal's time of the decision's line).
	overlaps, deads := 0, 0
	for _, n := range c.Nodes {
		if n == node {
			continue
		}
		for _, d := range busyDecisions(t, n, unit, frozenAt.Add(-time.Second), thawStart) {
			age := d.at.Sub(hb)
			switch {
			case d.dead:
				deads++
				if age <= runner.LeaseTTL {
					t.Errorf("%s at %s (heartbeat %s old): reported a dead holder before LeaseTTL %s", n, d.at.Format(time.TimeOnly), age.Round(time.Millisecond), runner.LeaseTTL)
				}
			default:
				overlaps++
				// The line is logged a moment after the decision.
				if age > runner.LeaseTTL+2*time.Second {
					t.Errorf("%s at %s (heartbeat %s old): an overlap, want the holder reported as stopped heart-beating", n, d.at.Format(time.TimeOnly), age.Round(time.Millisecond))
				}
			}
		}
	}
	if overlaps == 0 || deads == 0 {
		t.Errorf("%d overlap and %d dead-holder decisions while frozen: want both (the lease's two answers)", overlaps, deads)
	}
	t.Logf("frozen %s on %s for %s: %d slots during the freeze, %d overlap and %d dead-holder decisions; %d runs, %d executions",
		thawedAt.Sub(frozenAt).Round(time.Second), node, frozen.Key, frozenSlots, overlaps, deads, len(runs), len(execs))
}

// readLease reads a job's slot stamp from the shared storage.
func readLease(t *testing.T, path string) runner.Stamp {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read slot stamp: %v", err)
	}
	var st runner.Stamp
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("slot stamp %q: %v", b, err)
	}
	return st
}

// procState is the state letter of a process on a node (/proc/PID/stat).
func procState(t *testing.T, node string, pid int) string {
	t.Helper()
	out, err := c.Exec(node, nil, "cat", fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("state of %d on %s: %v %s", pid, node, err, out)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	i := strings.LastIndexByte(out, ')')
	if i < 0 {
		t.Fatalf("/proc/%d/stat on %s: %q", pid, node, out)
	}
	return strings.Fields(out[i+1:])[0]
}

// busyDecision is one decision of a node that found the lock held.
type busyDecision struct {
	at   time.Time
	dead bool // the holder stopped heart-beating (else: an overlap)
}

// busyDecisions reads the reported lock-busy decisions of a unit on a node
// between two times from its journal (only the node that reports a slot
// logs one).
func busyDecisions(t *testing.T, node, unit string, since, until time.Time) []busyDecision {
	t.Helper()
	out, err := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-o", "short-unix", "-u", unit+".service",
		"--since", "@"+strconv.FormatInt(since.Unix(), 10), "--until", "@"+strconv.FormatInt(until.Unix()+1, 10))
	if err != nil {
		t.Fatalf("journal of %s on %s: %v\n%s", unit, node, err, out)
	}
	var ds []busyDecision
	for _, line := range strings.Split(out, "\n") {
		overlap := strings.Contains(line, "not running: the previous run was still running")
		dead := strings.Contains(line, "not running: lock holder node")
		if !overlap && !dead {
			continue
		}
		ts, _, _ := strings.Cut(line, " ")
		sec, err := strconv.ParseFloat(ts, 64)
		if err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		at := time.Unix(0, int64(sec*1e9))
		if at.Before(since) || at.After(until) {
			continue
		}
		ds = append(ds, busyDecision{at: at, dead: dead})
	}
	return ds
}
