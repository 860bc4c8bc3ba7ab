package slots

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// A slot whose attempt 1 ran and failed and whose retry was only an
// overlap skip (never ran) should not show as skipped.
func TestRetryPlaceholderDoesNotHideTheAttemptThatRan(t *testing.T) {
	s := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	out := Classify(Input{Loc: time.UTC, Fires: []time.Time{s}, Now: s.Add(time.Hour),
		Runs: []Run{{ID: 1, Slot: s, Result: wire.ResultExitCode}, {ID: 2, Slot: s, Result: wire.ResultOverlapSkipped}}})
	if len(out) != 1 || out[0].State != Ran {
		t.Errorf("slot state %v (run %+v), want ran: attempt 1 ran and failed; the retry never ran", out[0].State, out[0].Run)
	}
}
