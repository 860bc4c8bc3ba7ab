package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Found by review: the node that ran a scheduled attempt is shut down
// mid-run and reports the shutdown's platform_error from the activation
// that reported the start. Another node's platform_error for the slot (its
// shared storage failed at the election) was recorded first. The runner's
// report is the slot's: it replaces that record (its node, its reason)
// and its attempt is retried; before, it was a duplicate, never retried.
func TestShutdownAfterAnotherNodesPlatformErrorIsRetried(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	node2, _, err := f.st.CreateNode(ctx, f.node.ShardID, "node2")
	must(t, err)
	const inv, otherInv = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	j := f.retryJob(1, 1)
	key := runkey.Scheduled(j.ID, slot)
	report := func(n store.Node, invocation string, shutdown bool) store.OutcomeResult {
		t.Helper()
		finished := time.Now().UTC().Add(-time.Second)
		res, err := f.st.RecordOutcome(ctx, n, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: slot,
			FinishedAt: &finished, Result: wire.ResultPlatformError, FailureReason: "platform",
			InvocationID: invocation, Shutdown: shutdown})
		must(t, err)
		return res
	}
	// node2 could not take part in the election (storage failure): it says so at once.
	report(node2, otherInv, false)
	// node1 won, started the command, and reported its start.
	if _, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: time.Now().UTC().Add(-time.Minute), InvocationID: inv}); err != nil {
		t.Fatal(err)
	}
	// node1 is shut down mid-run.
	res := report(f.node, inv, true)
	if want := runkey.Retry(j.ID, slot, 2); res.Retry != want {
		t.Errorf("shutdown-stopped attempt after another node's platform_error: duplicate=%v, retry %q, want %q; retry tasks %v",
			res.Duplicate, res.Retry, want, f.retryTasks(j.ID))
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND node_id = $2 AND invocation_id = $3`, j.ID, f.node.ID, inv); n != 1 {
		t.Errorf("the slot's record is not the node that ran it (%d records of it)", n)
	}
	// A redelivery of the same report is a duplicate now: one retry.
	if again := report(f.node, inv, true); !again.Duplicate || len(f.retryTasks(j.ID)) != 1 {
		t.Errorf("redelivery: duplicate=%v, retry tasks %v", again.Duplicate, f.retryTasks(j.ID))
	}
	// A node that did not run it (no start of its own) takes nothing over.
	other := store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: slot, Result: wire.ResultPlatformError,
		FailureReason: "platform", InvocationID: otherInv, Shutdown: true}
	if res, err := f.st.RecordOutcome(ctx, node2, j.ID, other); err != nil || !res.Duplicate {
		t.Errorf("a shutdown report of a node without a start: %+v %v, want a duplicate", res, err)
	}
}

// Found by review: attempt 1 fails, retry 2 is stopped by its node's
// shutdown (platform_error, retried: retry 3 queued), retry 3 fails. The
// slot's last counted attempt is retry 3: one failure. Retry 2 hands
// attempt 1 on to retry 3 (handOn); before, attempt 1 waited for retry 2's
// result, which never comes, and ResolveDroppedRetries made it count
// beside retry 3: one slot counted twice. end says how retry 3 ends, and
// want the failures the slot then counts.
func TestInterruptedRetryHandsItsAttemptOn(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  string // retry 3: "failed", "cancelled" or "dropped" (never reports)
		want int
	}{
		{"retry 3 fails", "failed", 1},
		{"retry 3 cancelled: attempt 1 counts again", "cancelled", 1},
		{"retry 3 dropped: attempt 1 counts again", "dropped", 1},
	} {
		t.Run(tc.name, func(t *testing.T) { interruptedRetry(t, tc.end, tc.want) })
	}
}

func interruptedRetry(t *testing.T, end string, want int) {
	f := newFixture(t)
	ctx := context.Background()
	const inv = "0123456789abcdef0123456789abcdef"
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	j := f.retryJob(2, 5)
	if res := f.attempt(j, runkey.Scheduled(j.ID, slot), slot, wire.ResultExitCode); res.Retry != runkey.Retry(j.ID, slot, 2) {
		t.Fatalf("attempt 1 queued %q", res.Retry)
	}
	r2 := runkey.Retry(j.ID, slot, 2)
	if _, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: r2, Version: j.Version, ScheduledAt: slot,
		StartedAt: time.Now().UTC().Add(-time.Minute), InvocationID: inv}); err != nil {
		t.Fatal(err)
	}
	finished := time.Now().UTC().Add(-time.Second)
	res, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: r2, Version: j.Version, ScheduledAt: slot,
		FinishedAt: &finished, Result: wire.ResultPlatformError, FailureReason: "the node shut down while the run was under way",
		InvocationID: inv, Shutdown: true})
	must(t, err)
	if res.Retry != runkey.Retry(j.ID, slot, 3) {
		t.Fatalf("interrupted retry 2 queued %q", res.Retry)
	}
	switch end {
	case "failed":
		if res := f.attempt(j, runkey.Retry(j.ID, slot, 3), slot, wire.ResultExitCode); res.Job.ConsecutiveFailures != 1 {
			t.Fatalf("after retry 3 failed: %d failures, want 1", res.Job.ConsecutiveFailures)
		}
	case "cancelled":
		f.attempt(j, runkey.Retry(j.ID, slot, 3), slot, wire.ResultCancelled)
	}
	n, err := f.st.ResolveDroppedRetries(ctx, time.Now().Add(2*time.Hour), store.RetryGrace)
	must(t, err)
	older := slot.Add(-24 * time.Hour) // any later outcome recounts
	res2 := f.attempt(j, runkey.Scheduled(j.ID, older), older, wire.ResultSuccess)
	if res2.Job.ConsecutiveFailures != want {
		t.Errorf("resolved %d dropped retries; then %d failures for one failed slot, want %d (uncounted failures at the slot: %d)",
			n, res2.Job.ConsecutiveFailures, want,
			f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at = $2 AND result = 'exit_code' AND NOT superseded`, j.ID, slot))
	}
}

// Review probe (sound): the same failed attempt of a job with
// retries, over the sweeper's lost record, delivered many times at once
// through batches (one replica) and alone (another): one run, one retry,
// one counted failure at most, exactly one non-duplicate answer.
func TestSameFailedAttemptBatchedAndAloneAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.retryJob(1, 5)
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	// the sweeper's lost record first
	_, err := f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, failure_reason)
		VALUES ($1, $2, $3, $4, 'lost', 'x')`, runkey.Scheduled(j.ID, slot), j.ID, j.Version, slot)
	must(t, err)
	started, finished := time.Now().UTC().Add(-2*time.Second), time.Now().UTC().Add(-time.Second)
	o := store.Outcome{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot,
		StartedAt: &started, FinishedAt: &finished, Result: wire.ResultExitCode}
	req := store.OutcomeRequest{Node: f.node, JobID: j.ID, Outcome: o}
	b := f.st.NewOutcomeBatcher(store.BatchConfig{})
	var mu sync.Mutex
	fresh, retries := 0, map[string]int{}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res []store.OutcomeResult
			switch i % 3 {
			case 0:
				r, err := f.st.RecordOutcome(ctx, f.node, j.ID, o)
				must(t, err)
				res = append(res, r)
			case 1:
				r, err := b.RecordOutcome(ctx, f.node, j.ID, o)
				must(t, err)
				res = append(res, r)
			default:
				for _, a := range f.st.RecordOutcomes(ctx, []store.OutcomeRequest{req, req}) {
					must(t, a.Err)
					res = append(res, a.Result)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range res {
				if !r.Duplicate {
					fresh++
				}
				if r.Retry != "" {
					retries[r.Retry]++
				}
			}
		}()
	}
	wg.Wait()
	if fresh != 1 || len(retries) != 1 {
		t.Errorf("%d non-duplicate answers, retries %v; want 1 and one", fresh, retries)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 1 {
		t.Errorf("%d runs", n)
	}
	if n := len(f.retryTasks(j.ID)); n != 1 {
		t.Errorf("%d retry tasks", n)
	}
	if got := f.get(j.ID); got.ConsecutiveFailures != 0 {
		t.Errorf("%d failures while the retry is pending", got.ConsecutiveFailures)
	}
}
