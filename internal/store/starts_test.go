package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// A node holds one start per job (a rewritten record cannot grow the
// table); a start under a placeholder record (another node's skip) is
// still a run in progress, one under a real record is not; a start past
// its job's timeout no longer reads as running.
func TestRunStarts(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3) // timeout 60 s
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	start := func(key string) bool {
		t.Helper()
		noted, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot, StartedAt: slot.Add(time.Second)})
		must(t, err)
		return noted
	}
	running := func() []string {
		t.Helper()
		rs, err := f.st.RunningRuns(ctx, j.ID)
		must(t, err)
		var keys []string
		for _, r := range rs {
			keys = append(keys, r.RunKey)
		}
		return keys
	}
	k1, k2 := runkey.Manual(j.ID, "1"), runkey.Manual(j.ID, "2")
	if !start(k1) || start(k1) {
		t.Fatal("a start is noted once")
	}
	for i := 0; i < 50; i++ { // a tenant rewriting its record's key
		start(runkey.Manual(j.ID, "fake"+string(rune('a'+i%26))+string(rune('a'+i/26))))
	}
	start(k2)
	if got := running(); len(got) != 1 || got[0] != k2 {
		t.Fatalf("running %v, want only the node's latest start", got)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_run_starts WHERE cron_job_id = $1`, j.ID); n != 1 {
		t.Fatalf("%d start rows for one job on one node, want 1", n)
	}

	k3 := runkey.Scheduled(j.ID, slot)
	f.outcome(j, slot, wire.ResultOverlapSkipped) // another node's skip of the slot
	if !start(k3) {
		t.Fatal("a start under another node's skip record was refused")
	}
	if got := running(); len(got) != 1 || got[0] != k3 {
		t.Fatalf("running %v, want the slot's run under the skip record", got)
	}
	f.outcome(j, slot, wire.ResultSuccess) // its real result
	if got := running(); len(got) != 0 {
		t.Fatalf("running %v after the slot's real result", got)
	}

	start(k1)
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_job_run_starts SET received_at = now() - interval '17 minutes' WHERE cron_job_id = $1`, j.ID)
	must(t, err)
	if got := running(); len(got) != 0 {
		t.Fatalf("running %v: a start past the job's timeout and the reach still reads as running", got)
	}
}

// A node whose own run ended as platform_error (its shutdown stopped it)
// ends its start: the run no longer reads as running. Another node's
// platform error under the key, or one from another activation, leaves
// the start of the node that runs the slot; the node's own report ends
// it even when it finds another node's placeholder recorded first.
func TestOwnPlatformErrorEndsItsStart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	node2, _, err := f.st.CreateNode(ctx, f.node.ShardID, "node2")
	must(t, err)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	key := runkey.Scheduled(j.ID, slot)
	const inv, otherInv = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	if _, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: slot.Add(time.Second), InvocationID: inv}); err != nil {
		t.Fatal(err)
	}
	report := func(n store.Node, invocation string) store.OutcomeResult {
		t.Helper()
		finished := slot.Add(2 * time.Second)
		res, err := f.st.RecordOutcome(ctx, n, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: slot,
			FinishedAt: &finished, Result: wire.ResultPlatformError, FailureReason: "the node shut down while the run was under way: killed by SIGTERM",
			InvocationID: invocation})
		must(t, err)
		return res
	}
	running := func() int {
		t.Helper()
		rs, err := f.st.RunningRuns(ctx, j.ID)
		must(t, err)
		return len(rs)
	}
	report(node2, otherInv) // another node's platform error for the slot
	if running() != 1 {
		t.Fatal("another node's platform error ended the start of the node that runs the slot")
	}
	if res := report(f.node, otherInv); !res.Duplicate || running() != 1 {
		t.Fatalf("a report of another activation of this node (duplicate %v) ended the start", res.Duplicate)
	}
	if res := report(f.node, inv); !res.Duplicate || running() != 0 {
		t.Fatalf("the node's own platform error (duplicate %v) left its run reading as running", res.Duplicate)
	}
	if r := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = 'platform_error'`, j.ID); r != 1 {
		t.Errorf("%d platform_error records, want 1", r)
	}
	if n := f.count(`SELECT consecutive_failures FROM cron_jobs WHERE id = $1`, j.ID); n != 0 {
		t.Errorf("%d counted failures, want 0", n)
	}

	// The node's own report first: it is the record, and it ends the start.
	slot, key = slot.Add(-time.Minute), runkey.Scheduled(j.ID, slot.Add(-time.Minute))
	if _, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: slot.Add(time.Second), InvocationID: inv}); err != nil {
		t.Fatal(err)
	}
	if running() != 1 {
		t.Fatal("the second slot's start does not read as running")
	}
	if res := report(f.node, inv); res.Duplicate || running() != 0 {
		t.Fatalf("the node's own platform error (duplicate %v) left its run reading as running", res.Duplicate)
	}
}

// A scheduled attempt of a job with retries, stopped by its node's
// shutdown: the node's own platform_error (the activation that reported
// its start) is retried as a failure would be, and counts as none; a
// platform error from a node that did not run it is not retried.
func TestShutdownStoppedAttemptIsRetried(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	node2, _, err := f.st.CreateNode(ctx, f.node.ShardID, "node2")
	must(t, err)
	const inv = "0123456789abcdef0123456789abcdef"
	slot := time.Now().UTC().Truncate(24 * time.Hour) // a daily job's latest slot: a retry now falls before the next
	report := func(j store.CronJob, n store.Node, shutdown bool) store.OutcomeResult {
		t.Helper()
		finished := time.Now().UTC().Add(-time.Second)
		res, err := f.st.RecordOutcome(ctx, n, j.ID, store.Outcome{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot,
			FinishedAt: &finished, Result: wire.ResultPlatformError, FailureReason: "the node shut down while the run was under way: killed by SIGTERM",
			InvocationID: inv, Shutdown: shutdown})
		must(t, err)
		return res
	}
	start := func(j store.CronJob) {
		t.Helper()
		if _, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot,
			StartedAt: time.Now().UTC().Add(-time.Minute), InvocationID: inv}); err != nil {
			t.Fatal(err)
		}
	}
	// Another node's platform error (it did not run the slot): no retry.
	other := f.retryJob(1, 1)
	start(other)
	if res := report(other, node2, true); res.Retry != "" {
		t.Fatalf("another node's platform error queued retry %s", res.Retry)
	}
	// The run's own activation, but a platform error its tenant's command
	// can provoke (a rewritten record, its runner killed), not the
	// shutdown's: no retry.
	forged := f.retryJob(1, 1)
	start(forged)
	if res := report(forged, f.node, false); res.Retry != "" {
		t.Fatalf("a platform error without the shutdown's word queued retry %s", res.Retry)
	}
	j := f.retryJob(1, 1)
	start(j)
	res := report(j, f.node, true)
	if want := runkey.Retry(j.ID, slot, 2); res.Retry != want {
		t.Fatalf("the attempt its node's shutdown stopped queued retry %q, want %q", res.Retry, want)
	}
	if _, ok := f.retryTasks(j.ID)[runkey.Retry(j.ID, slot, 2)]; !ok {
		t.Errorf("retry tasks %v: attempt 2 not queued", f.retryTasks(j.ID))
	}
	if got := f.get(j.ID); got.ConsecutiveFailures != 0 || !got.Enabled {
		t.Errorf("job after the stopped attempt: %d failures, enabled %v; want 0 and enabled", got.ConsecutiveFailures, got.Enabled)
	}
}

// A start that arrives after its own activation's platform error (the
// node agent reports starts every 2 s; the shutdown's report came first)
// is not noted: the run does not read as running again.
func TestLateStartAfterItsOwnEndIsNotNoted(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	const inv = "0123456789abcdef0123456789abcdef"
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	key := runkey.Scheduled(j.ID, slot)
	finished := slot.Add(2 * time.Second)
	_, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: slot,
		FinishedAt: &finished, Result: wire.ResultPlatformError, InvocationID: inv})
	must(t, err)
	noted, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: slot.Add(time.Second), InvocationID: inv})
	must(t, err)
	rs, err := f.st.RunningRuns(ctx, j.ID)
	must(t, err)
	if noted || len(rs) != 0 {
		t.Errorf("late start noted %v, %d runs read as running; want neither", noted, len(rs))
	}
	// Another activation's start under the same key (another node's
	// platform error recorded, this node runs the slot) is still noted.
	noted, err = f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: slot.Add(time.Second), InvocationID: "fedcba9876543210fedcba9876543210"})
	must(t, err)
	if !noted {
		t.Error("a start of another activation under a placeholder record was refused")
	}
}
