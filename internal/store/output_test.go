package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestOutputTailRoundTrips: the end of a run's output is stored with the
// run and shown by GetRun, not by the listing; a redelivered report
// changes nothing; a placeholder (an overlap skip) gives way to the real
// result's tail, and a late placeholder never wipes it.
func TestOutputTailRoundTrips(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(5)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	key := runkey.Scheduled(j.ID, slot)
	started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
	report := func(r wire.Result, tail *string, dropped int64) store.OutcomeResult {
		t.Helper()
		res, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{
			RunKey: key, Version: j.Version, ScheduledAt: slot, StartedAt: &started, FinishedAt: &finished, Result: r,
			OutputTail: tail, OutputTruncated: dropped > 0, OutputDroppedBytes: dropped,
		})
		must(t, err)
		return res
	}
	if res := report(wire.ResultOverlapSkipped, nil, 0); res.Duplicate {
		t.Fatalf("overlap skip: %+v", res)
	}
	run, err := f.st.GetRun(ctx, j.ID, 0, key)
	must(t, err)
	if run.OutputTail != nil || run.OutputTruncated {
		t.Errorf("skip: tail %v truncated %v, want none", run.OutputTail, run.OutputTruncated)
	}

	tail := "step 1 ok\nError: database is gone\n"
	if res := report(wire.ResultExitCode, &tail, 1234); !res.Replaced {
		t.Fatalf("real result: %+v, want the skip replaced", res)
	}
	other := "a redelivery of another tail\n"
	if res := report(wire.ResultExitCode, &other, 0); !res.Duplicate {
		t.Errorf("redelivery: %+v, want duplicate", res)
	}
	if res := report(wire.ResultOverlapSkipped, nil, 0); !res.Duplicate {
		t.Errorf("a late placeholder: %+v, want duplicate", res)
	}
	run, err = f.st.GetRun(ctx, j.ID, 0, key)
	must(t, err)
	if run.OutputTail == nil || *run.OutputTail != tail || !run.OutputTruncated || run.OutputDroppedBytes != 1234 {
		t.Errorf("stored tail %v truncated %v dropped %d, want the real result's", run.OutputTail, run.OutputTruncated, run.OutputDroppedBytes)
	}
	runs, err := f.st.ListRuns(ctx, j.ID, 10)
	must(t, err)
	if len(runs) != 1 || !runs[0].OutputTruncated || runs[0].OutputDroppedBytes != 1234 {
		t.Errorf("listing %+v: want the one run with its cut counts", runs)
	}

	// A run that wrote nothing keeps "" (captured, empty), not null.
	slot2 := slot.Add(time.Minute)
	empty := ""
	_, err = f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: runkey.Scheduled(j.ID, slot2), Version: j.Version,
		ScheduledAt: slot2, StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess, OutputTail: &empty})
	must(t, err)
	run, err = f.st.GetRun(ctx, j.ID, 0, runkey.Scheduled(j.ID, slot2))
	must(t, err)
	if run.OutputTail == nil || *run.OutputTail != "" {
		t.Errorf("empty output stored as %v, want \"\"", run.OutputTail)
	}
}
