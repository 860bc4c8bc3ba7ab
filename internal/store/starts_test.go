package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
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
