package outcome

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
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
