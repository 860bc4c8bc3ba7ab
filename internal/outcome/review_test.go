package outcome

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// The runner exits 75 only when it did not run the command. If its final
// record could not be written (the runtime dir's tmpfs filled up after the
// first write), the record still says "started"; reporting that as a
// platform error under the slot's key would shadow the real outcome of the
// node that ran the slot (a second real result is a duplicate).
func TestSkipWithStaleStartedRecordIsSilent(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	rec := runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: now.Add(-25 * time.Second), Node: "n2"}
	if r, silent := Classify(Service{Result: "success", ExitCode: "exited", ExitStatus: "75"}, rec, true, now); !silent {
		t.Fatalf("a skip (exit 75) was reported as %s: %q", r.Result, r.FailureReason)
	}
}

// A report the core refuses for good (a 4xx: a node clock more than the
// API's 5 minutes ahead makes every report "scheduled_at is in the
// future") was only logged by the hook: the outcome of a run that really
// happened vanished. It is kept in the dead-letter dir, where the node
// agent's state shows it, as a redelivered report would be.
func TestRefusedReportIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	job := "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	r := wire.Outcome{RunKey: job + "#scheduled#2026-11-21T12:00:00Z", Version: 1, Result: wire.ResultSuccess,
		ScheduledAt: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	if err := SpoolDead(dir, job, r, errors.New("post outcome: 400 scheduled_at is in the future: "+ErrPermanent.Error())); err != nil {
		t.Fatal(err)
	}
	if pending, dead := SpoolCounts(dir); pending != 0 || dead != 1 {
		t.Fatalf("pending %d, dead %d: want the refused report dead-lettered", pending, dead)
	}
	b, err := os.ReadFile(filepath.Join(dir, DeadLetterDir, SpoolName(job, r.RunKey)))
	var s Spooled
	if err != nil || json.Unmarshal(b, &s) != nil || s.Report.RunKey != r.RunKey || s.LastError == "" {
		t.Fatalf("dead letter %q: %v", b, err)
	}
}

// A spooled file larger than any report the core accepts is set aside,
// not read into memory on every pass and retried for ever.
func TestOversizedSpoolFileIsDeadLettered(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, MaxSpooledBytes+1)
	for i := range big {
		big[i] = ' '
	}
	if err := os.WriteFile(filepath.Join(dir, "huge.json"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	var st Stats
	items, errs := loadSpool(dir, time.Now(), &st)
	if len(items) != 0 || len(errs) != 1 || st.DeadLettered != 1 {
		t.Fatalf("items %d, errors %v, dead-lettered %d: want the oversized file set aside", len(items), errs, st.DeadLettered)
	}
	if pending, dead := SpoolCounts(dir); pending != 0 || dead != 1 {
		t.Fatalf("pending %d, dead %d", pending, dead)
	}
}
