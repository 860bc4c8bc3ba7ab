//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestOverlapPolicies: two minutely jobs on three nodes whose first run
// overruns its interval (the first run of each job, whichever slot and
// node, takes a directory on shared storage and sleeps).
//   - buffer_one: the first run (slot s) sleeps 80 s, past the fire of
//     s+1; s+1 waits on the idle nodes and runs exactly once, after s
//     ended; s+2 runs on time.
//   - cancel_previous: the first run sleeps 100 s; when s+1 comes its
//     runner stops it (recorded cancelled, no failure), and s+1 runs
//     exactly once.
//
// Every slot runs at most once across the shard (the witness log, one
// line per execution), and has at most one record.
func TestOverlapPolicies(t *testing.T) {
	const command = `echo "$(hostname) $HOSTCRON_RUN_KEY" >> "overlap-$HOSTCRON_CRON_JOB_ID.log"; ` +
		`if mkdir "first-$HOSTCRON_CRON_JOB_ID" 2>/dev/null; then sleep "$OVERRUN"; fi`
	newJob := func(policy wire.OverlapPolicy, overrun string) wire.Job {
		j := c.NewJobWithEnv(t, "acme", "0 * * * * *", command, map[string]string{"OVERRUN": overrun}, 150, 64, 1)
		if _, err := c.Store.Pool().Exec(t.Context(), `UPDATE cron_jobs SET overlap_policy = $2 WHERE id = $1`, j.ID, string(policy)); err != nil {
			t.Fatal(err)
		}
		d, _, err := c.Store.DesiredJob(t.Context(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.OverlapPolicy != policy {
			t.Fatalf("desired job carries overlap policy %q, want %q", d.OverlapPolicy, policy)
		}
		return d
	}
	buffer, cancel := newJob(wire.OverlapBufferOne, "80"), newJob(wire.OverlapCancelPrevious, "100")
	jobs := []wire.Job{buffer, cancel}
	for _, n := range c.Nodes {
		c.Agent(t, n, jobs, nil, "apply")
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			c.Agent(t, n, nil, nil, "remove", buffer.UnitName(), cancel.UnitName())
		}
	})
	// The unit's start timeout covers the wait beside the job's timeout.
	if out, err := c.Exec("node1", nil, "systemctl", "show", "-P", "TimeoutStartUSec", buffer.UnitName()+".service"); err != nil || strings.TrimSpace(out) == "2min 30s" {
		t.Errorf("TimeoutStartUSec %q (%v): want the timeout plus the wait", strings.TrimSpace(out), err)
	}

	executions := func(j wire.Job) map[string]int {
		n := map[string]int{}
		b, _ := os.ReadFile(filepath.Join(c.Shared, "www/acme/public/overlap-"+j.ID+".log"))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				n[f[1]]++
			}
		}
		return n
	}
	holderOf := func(j wire.Job, key string) string {
		b, _ := os.ReadFile(filepath.Join(c.Shared, "www/acme/public/overlap-"+j.ID+".log"))
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == key {
				return f[0]
			}
		}
		return ""
	}
	// first is the job's first slot: the first record's.
	bySlot := func(runs []store.Run) map[time.Time][]store.Run {
		out := map[time.Time][]store.Run{}
		for _, r := range runs {
			out[r.ScheduledAt.UTC()] = append(out[r.ScheduledAt.UTC()], r)
		}
		return out
	}
	first := func(runs []store.Run) time.Time {
		var f time.Time
		for _, r := range runs {
			if f.IsZero() || r.ScheduledAt.Before(f) {
				f = r.ScheduledAt.UTC()
			}
		}
		return f
	}
	ran := func(runs []store.Run, slot time.Time) bool {
		rs := bySlot(runs)[slot]
		return len(rs) == 1 && rs[0].Result != ""
	}

	// Both jobs: the first run's slot s, then s+1 and s+2 recorded.
	var bufRuns, canRuns []store.Run
	bufRuns = c.WaitRuns(t, buffer.ID, 6*time.Minute, func(r []store.Run) bool {
		s := first(r)
		return !s.IsZero() && ran(r, s) && ran(r, s.Add(time.Minute)) && ran(r, s.Add(2*time.Minute))
	})
	canRuns = c.WaitRuns(t, cancel.ID, 3*time.Minute, func(r []store.Run) bool {
		s := first(r)
		return !s.IsZero() && ran(r, s) && ran(r, s.Add(time.Minute))
	})
	time.Sleep(15 * time.Second) // a second execution or record, were there one, would show by now
	bufRuns, _ = c.Store.ListRuns(t.Context(), buffer.ID, 1000)
	canRuns, _ = c.Store.ListRuns(t.Context(), cancel.ID, 1000)

	// buffer_one: s overran s+1's fire; s+1 ran once, after s ended.
	s := first(bufRuns)
	slots := bySlot(bufRuns)
	r0, r1, r2 := slots[s], slots[s.Add(time.Minute)], slots[s.Add(2*time.Minute)]
	if len(r0) != 1 || r0[0].Result != wire.ResultSuccess || r0[0].FinishedAt == nil || r0[0].FinishedAt.Before(s.Add(80*time.Second)) {
		t.Fatalf("buffer_one: slot %s records %+v, want one success that overran the next slot", s, r0)
	}
	if len(r1) != 1 || r1[0].Result != wire.ResultSuccess || r1[0].StartedAt == nil || r1[0].StartedAt.Before(*r0[0].FinishedAt) {
		t.Errorf("buffer_one: the buffered slot %s: %+v, want one success started after %s ended (%v)", s.Add(time.Minute), r1, s, r0[0].FinishedAt)
	}
	if len(r2) != 1 || r2[0].Result != wire.ResultSuccess {
		t.Errorf("buffer_one: slot %s after the overrun: %+v, want one success", s.Add(2*time.Minute), r2)
	}
	// What systemd did on the holder's node with the fire of s+1 during
	// the run (docs/semantics.md, "Overlap policies"): its starts of the
	// service, from PID 1's journal.
	if holder := holderOf(buffer, runkey.Scheduled(buffer.ID, s)); holder != "" {
		out, _ := c.Exec(holder, nil, "journalctl", "-q", "--no-pager", "-o", "short-iso-precise", "_PID=1", "UNIT="+buffer.UnitName()+".service")
		t.Logf("buffer_one: slot %s ran on %s (ended %s); PID 1 on that node:\n%s", s, holder, r0[0].FinishedAt, out)
	}
	for key, n := range executions(buffer) {
		if n != 1 {
			t.Errorf("buffer_one: run %s executed %d times across the shard", key, n)
		}
	}
	for _, k := range []time.Time{s, s.Add(time.Minute), s.Add(2 * time.Minute)} {
		if n := executions(buffer)[runkey.Scheduled(buffer.ID, k)]; n != 1 {
			t.Errorf("buffer_one: slot %s executed %d times, want 1", k, n)
		}
	}

	// cancel_previous: s stopped when s+1 came, recorded cancelled; s+1
	// ran once.
	s = first(canRuns)
	slots = bySlot(canRuns)
	c0, c1 := slots[s], slots[s.Add(time.Minute)]
	if len(c0) != 1 || c0[0].Result != wire.ResultCancelled || !strings.Contains(c0[0].FailureReason, "cancel_previous") {
		t.Errorf("cancel_previous: slot %s records %+v, want one cancelled by the next slot", s, c0)
	}
	if len(c0) == 1 && c0[0].FinishedAt != nil && c0[0].FinishedAt.After(s.Add(time.Minute+30*time.Second)) {
		t.Errorf("cancel_previous: slot %s ended at %s, not promptly when the next slot came", s, c0[0].FinishedAt)
	}
	if len(c1) != 1 || c1[0].Result != wire.ResultSuccess {
		t.Errorf("cancel_previous: slot %s records %+v, want one success", s.Add(time.Minute), c1)
	}
	for key, n := range executions(cancel) {
		if n != 1 {
			t.Errorf("cancel_previous: run %s executed %d times across the shard", key, n)
		}
	}
	if n := executions(cancel)[runkey.Scheduled(cancel.ID, s.Add(time.Minute))]; n != 1 {
		t.Errorf("cancel_previous: slot %s executed %d times, want 1", s.Add(time.Minute), n)
	}
	if j, err := c.Store.GetJob(t.Context(), cancel.ID); err != nil || j.ConsecutiveFailures != 0 || j.Status == wire.StatusAutoDisabled {
		t.Errorf("cancel_previous (max_failures 1): %d failures, status %s (%v): a superseded run is no failure", j.ConsecutiveFailures, j.Status, err)
	}
}
