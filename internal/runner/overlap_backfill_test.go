package runner

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// A backfill of an older slot of a cancel_previous job must run its command
// to the end, not be stopped at once as "superseded" by a slot long past.
func TestBackfillOfCancelPreviousJobIsNotStoppedAtOnce(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 1, 50, 0, time.UTC)
	env, locks := setupPolicy(t, wire.OverlapCancelPrevious, now)
	env.Start = Start{} // the agent's start, not the timer's
	env.ManualDir = t.TempDir()
	past := time.Date(2026, 11, 21, 11, 58, 0, 0, time.UTC)
	key := runkey.Backfill(id, past, "7")
	body := "7\n" + now.Add(-time.Second).Format(time.RFC3339) + "\n" + key + "\n"
	if err := os.WriteFile(filepath.Join(env.ManualDir, "cron-acme-"+id), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	hold(t, locks, past.Format(time.RFC3339))
	done := async(env)
	eventually(t, "the backfill runs", func() bool { return len(runs(t, locks)) == 1 })
	time.Sleep(500 * time.Millisecond)
	unhold(t, locks, past.Format(time.RFC3339))
	done()
	r := record(t, env)
	if r.SupersededBy != nil {
		t.Fatalf("backfill of %s stopped as superseded by %s right at its start: record %+v", past, r.SupersededBy, r)
	}
}
