//go:build e2e

package faults

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// fallBackZone is the custom zone of TestDSTFallBack: DST with a saving of
// fallBack, ending (the clocks go back) at the instant the test picks.
const fallBackZone = "Hostcron/Fallback"

// fallBack is how far the clocks go back: the wall minutes [U, U+fallBack)
// of the zone happen twice, first at UTC [U-fallBack, U) and again at UTC
// [U, U+fallBack).
const fallBack = 3 * time.Minute

// TestDSTFallBack (issue 11, scenario d): an every-minute job in a zone
// whose clocks fall back by three minutes a minute and a half after the
// test starts, on three real systemd nodes, with its timer restarted on one
// node in the second pass. docs/semantics.md ("Time zones and DST"): a wall
// time that exists twice fires once, at its first occurrence; a start in
// the second pass maps its wall time to the first instant, which already
// ran, and runs nothing. So: no run key twice, no wall minute twice, no run
// keyed by a second-pass instant, every other minute runs exactly once
// (none silenced), every record a real success of a witnessed run, and
// the restarted node's second-pass starts were refused as late fires of
// first-pass slots.
//
// Not parallel: its slots are fixed wall-clock minutes around a transition
// it cannot move, so it runs alone (Go runs non-parallel tests first) and
// no other scenario's load can push a fire out of its window.
func TestDSTFallBack(t *testing.T) {
	// The clocks go back at the first whole minute at least 90 s ahead, so
	// the job is on every node before its last first-pass slot.
	u := time.Now().Add(90 * time.Second).Truncate(time.Minute).Add(time.Minute).UTC()
	src := fmt.Sprintf("Zone %s 0:00 0:%02d HCS %su\n\t\t0:00 - HCT\n",
		fallBackZone, int(fallBack/time.Minute), u.Format("2006 Jan 2 15:04:05"))
	tzif := harness.CompileZone(t, fallBackZone, src)
	loc, err := time.LoadLocationFromTZData(fallBackZone, tzif)
	if err != nil {
		t.Fatalf("load the compiled zone: %v", err)
	}
	checkZone(t, loc, u)
	c.InstallZone(t, fallBackZone, tzif)

	job := c.NewJobInZone(t, "acme", "* * * * *", fallBackZone, harness.WitnessCommand("dst.log", ""), 30, 64, 0)
	unit := job.UnitName()
	t.Cleanup(func() { // before the zone goes (cleanups run last first)
		for _, n := range c.Nodes {
			c.Agent(t, n, nil, nil, "remove", unit)
		}
	})
	applyAll(t, job)
	ready := time.Now()
	dumpOnFailure(t, unit)
	t.Logf("clocks go back at %s UTC: wall %s–%s repeats; job on all nodes at %s",
		u.Format(time.TimeOnly), u.In(loc).Format("15:04"), u.Add(fallBack-time.Minute).In(loc).Format("15:04"), ready.UTC().Format(time.TimeOnly))

	// Restart the timer on one node in the middle of the second pass.
	restarted := c.Nodes[1]
	time.Sleep(time.Until(u.Add(70 * time.Second)))
	restartedAt := time.Now()
	if out, err := c.Exec(restarted, nil, "systemctl", "restart", unit+".timer"); err != nil {
		t.Fatalf("restart %s.timer on %s: %v %s", unit, restarted, err, out)
	}

	// The first minute after the repeated window must run; wait for it.
	after := u.Add(fallBack)
	c.WaitRuns(t, job.ID, time.Until(after)+90*time.Second, func(r []store.Run) bool {
		return slices.ContainsFunc(r, func(x store.Run) bool { return x.ScheduledAt.Equal(after) })
	})
	disableEverywhere(t, job.ID, 3*time.Second)

	execs := harness.ReadWitness(t, filepath.Join(c.Shared, "www/acme/public/dst.log"))
	runs := runsBySlot(t, job.ID)
	harness.CheckExactlyOnce(t, execs, runs)
	// Every minute from the first whose fires all come after the job was
	// on every node up to the first one after the window, except the
	// second pass, must have run.
	var must []time.Time
	for s := ready.Truncate(time.Minute).Add(time.Minute); !s.After(after); s = s.Add(time.Minute) {
		if !inSecondPass(s, u) {
			must = append(must, s.UTC())
		}
	}
	for _, p := range checkFallBack(execs, runs, loc, u, must) {
		t.Error(p)
	}
	// The check must be able to fail: a second run of a repeated wall
	// minute, keyed by its second-pass instant, is what a runner that did
	// not map second-pass wall times would do.
	first := slices.IndexFunc(execs, func(e harness.Execution) bool { return !e.Key.Slot.Before(u.Add(-fallBack)) && e.Key.Slot.Before(u) })
	if first < 0 {
		t.Fatalf("no first-pass minute ran (%d executions): nothing was tested", len(execs))
	}
	double := harness.Execution{Node: "nodeX", Key: runkey.Key{JobID: job.ID, Trigger: wire.TriggerScheduled, Slot: execs[first].Key.Slot.Add(fallBack)}}
	if p := checkFallBack(append(slices.Clone(execs), double), runs, loc, u, must); !slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, "twice") }) {
		t.Errorf("the check misses a second run of wall %s: %v", double.Key.Slot.In(loc).Format("15:04"), p)
	}

	// The restarted node's timer, re-armed in the second pass, still
	// fired for the second-pass wall times ahead (systemd 252 did not
	// start the service at the restart itself, seen on the test nodes),
	// and the runner refused each such start as a late fire of a
	// first-pass slot.
	late := lateFires(t, restarted, unit, restartedAt)
	n := 0
	for _, l := range late {
		if l.at.Before(u) || !l.at.Before(after) {
			continue
		}
		n++
		t.Logf("%s: start at %s refused as a late fire of slot %s", restarted, l.at.UTC().Format("15:04:05.000"), l.slot.Format(time.RFC3339))
		if inSecondPass(l.slot, u) {
			t.Errorf("%s: the start at %s named the second-pass slot %s", restarted, l.at.Format(time.TimeOnly), l.slot.Format(time.RFC3339))
		}
	}
	if n == 0 {
		t.Errorf("%s started no run in the second pass after its timer restart at %s: the scenario tested nothing", restarted, restartedAt.UTC().Format(time.TimeOnly))
	}
	t.Logf("%d executions for %d minutes that must run; %s refused %d second-pass starts as late fires", len(execs), len(must), restarted, n)
}

// inSecondPass reports whether slot is a second-pass instant of the
// repeated window (clocks going back at u).
func inSecondPass(slot, u time.Time) bool {
	return !slot.Before(u) && slot.Before(u.Add(fallBack))
}

// checkZone checks that the compiled zone really falls back at u.
func checkZone(t *testing.T, loc *time.Location, u time.Time) {
	t.Helper()
	before, after := u.Add(-time.Second).In(loc), u.In(loc)
	_, offBefore := before.Zone()
	_, offAfter := after.Zone()
	if !before.IsDST() || after.IsDST() || time.Duration(offBefore-offAfter)*time.Second != fallBack {
		t.Fatalf("zone: %s (DST %v) then %s (DST %v): not a fall-back of %s at %s", before, before.IsDST(), after, after.IsDST(), fallBack, u)
	}
}

// checkFallBack checks executions and run records of an every-minute job
// across a fall-back at u against docs/semantics.md: no run key and no
// wall minute ran twice, no run (or record) is keyed by a second-pass
// instant, every slot in must ran exactly once, and every record is a
// success of a slot of the schedule. It returns what is wrong.
func checkFallBack(execs []harness.Execution, runs []store.Run, loc *time.Location, u time.Time, must []time.Time) []string {
	var problems []string
	byKey := map[string]string{}
	byWall := map[string]time.Time{}
	count := map[time.Time]int{}
	for _, e := range execs {
		if e.Key.Trigger != wire.TriggerScheduled {
			problems = append(problems, fmt.Sprintf("%s ran on %s: not a scheduled run", e.Key, e.Node))
			continue
		}
		slot := e.Key.Slot.UTC()
		count[slot]++
		if prev, dup := byKey[e.Key.String()]; dup {
			problems = append(problems, fmt.Sprintf("%s ran twice: on %s and on %s", e.Key, prev, e.Node))
		}
		byKey[e.Key.String()] = e.Node
		wall := slot.In(loc).Format("2006-01-02 15:04")
		if prev, dup := byWall[wall]; dup && !prev.Equal(slot) {
			problems = append(problems, fmt.Sprintf("wall minute %s ran twice: slots %s and %s", wall, prev.Format(time.RFC3339), slot.Format(time.RFC3339)))
		}
		byWall[wall] = slot
		if inSecondPass(slot, u) {
			problems = append(problems, fmt.Sprintf("%s ran on %s: a second-pass instant of wall %s (its first instant is %s)",
				e.Key, e.Node, slot.In(loc).Format("15:04"), slot.Add(-fallBack).Format(time.RFC3339)))
		}
	}
	for _, s := range must {
		if count[s] != 1 {
			problems = append(problems, fmt.Sprintf("slot %s (wall %s) ran %d times, want once", s.Format(time.RFC3339), s.In(loc).Format("15:04"), count[s]))
		}
	}
	recorded := map[time.Time]bool{}
	for _, r := range runs {
		recorded[r.ScheduledAt.UTC()] = true
		switch {
		case r.Result != wire.ResultSuccess:
			problems = append(problems, fmt.Sprintf("run %s recorded as %s (%s), want success", r.RunKey, r.Result, r.FailureReason))
		case inSecondPass(r.ScheduledAt, u):
			problems = append(problems, fmt.Sprintf("run %s recorded under a second-pass instant", r.RunKey))
		case r.ScheduledAt.Truncate(time.Minute) != r.ScheduledAt:
			problems = append(problems, fmt.Sprintf("run %s is not under a minute of the schedule", r.RunKey))
		}
	}
	for _, s := range must {
		if !recorded[s] {
			problems = append(problems, fmt.Sprintf("slot %s has no run record", s.Format(time.RFC3339)))
		}
	}
	return problems
}

// lateFire is one start the runner refused as a late fire.
type lateFire struct {
	at   time.Time // when the runner logged it
	slot time.Time // the slot it named
}

var lateFireRE = regexp.MustCompile(`late fire: started \S+ after slot (\S+),`)

// lateFires reads the late fires of a unit's service on a node since a
// time from its journal.
func lateFires(t *testing.T, node, unit string, since time.Time) []lateFire {
	t.Helper()
	out, err := c.Exec(node, nil, "journalctl", "-q", "--no-pager", "-o", "short-unix",
		"-u", unit+".service", "--since", "@"+strconv.FormatInt(since.Unix(), 10))
	if err != nil {
		t.Fatalf("journal of %s on %s: %v\n%s", unit, node, err, out)
	}
	var fires []lateFire
	for _, line := range strings.Split(out, "\n") {
		m := lateFireRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ts, _, _ := strings.Cut(line, " ")
		sec, err := strconv.ParseFloat(ts, 64)
		slot, serr := time.Parse(time.RFC3339, m[1])
		if err != nil || serr != nil {
			t.Fatalf("journal line %q: %v %v", line, err, serr)
		}
		fires = append(fires, lateFire{at: time.Unix(0, int64(sec*1e9)), slot: slot})
	}
	return fires
}
