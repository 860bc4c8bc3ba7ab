package unitmgr

import (
	"testing"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestWaitingCatchUp: the runners a job change or a cancel stops before
// their command starts are the catch-ups and the slots waiting for the
// previous run (overlap_policy); an on-time runner that elects, or one
// whose command runs, is never one.
func TestWaitingCatchUp(t *testing.T) {
	for _, tt := range []struct {
		name string
		rec  runner.Record
		want bool
	}{
		{"catch-up before its command", runner.Record{Kind: runner.KindStarted, Trigger: string(wire.TriggerCatchUp)}, true},
		{"slot waiting for the previous run", runner.Record{Kind: runner.KindStarted, Trigger: string(wire.TriggerScheduled), Waiting: true}, true},
		{"on-time runner electing", runner.Record{Kind: runner.KindStarted, Trigger: string(wire.TriggerScheduled)}, false},
		{"command running", runner.Record{Kind: runner.KindRan, Trigger: string(wire.TriggerScheduled), Waiting: true}, false},
	} {
		if got := waitingCatchUp(tt.rec); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
