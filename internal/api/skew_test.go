package api

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// A node whose clock runs ahead, but less than the runner's MaxSkew, runs
// its slots (docs/semantics.md, "Clocks"): the core records what it ran.
// A refusal would be for good (a 400 is dead-lettered by the node), and
// the run would read as lost. Until review it refused more than 5 minutes.
func TestOutcomeOfANodeAheadWithinMaxSkewIsAccepted(t *testing.T) {
	const jobID = "11111111-1111-1111-1111-111111111111"
	core := time.Date(2026, 11, 24, 11, 54, 10, 0, time.UTC) // the core's clock
	for _, ahead := range []time.Duration{90 * time.Second, 6 * time.Minute, runner.MaxSkew - time.Second} {
		// The node's timer fired the slot by its clock; the command took 10 s.
		slot := core.Add(ahead).Truncate(time.Minute)
		started, finished := slot, core.Add(ahead)
		req := wire.Outcome{RunKey: runkey.Scheduled(jobID, slot), Version: 1, ScheduledAt: slot,
			StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess}
		if _, err := validateOutcome(jobID, req, core); err != nil {
			t.Errorf("outcome of a run a node %s ahead made (the runner runs up to %s) refused: %v", ahead, runner.MaxSkew, err)
		}
	}
	// Beyond it and the core's margin: refused (no correct node names it).
	slot := core.Add(outcomeSkew + time.Minute).Truncate(time.Minute)
	req := wire.Outcome{RunKey: runkey.Scheduled(jobID, slot), Version: 1, ScheduledAt: slot, Result: wire.ResultSuccess}
	if _, err := validateOutcome(jobID, req, core); err == nil {
		t.Errorf("a slot %s ahead accepted", outcomeSkew+time.Minute)
	}
}
