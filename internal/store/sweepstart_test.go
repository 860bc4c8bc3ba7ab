package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestSweepAfterProvisioning(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	earlier := now.Add(-time.Hour)
	for _, tc := range []struct {
		name   string
		swept  *time.Time
		status wire.Status
		took   int
		want   *time.Time
	}{
		{"first node has it: the sweep starts now", nil, wire.StatusActive, 3, &now},
		{"some nodes have it (failed): starts now", nil, wire.StatusFailed, 1, &now},
		{"no node took it: nothing to count", nil, wire.StatusFailed, 0, nil},
		{"a shard without nodes: nothing to count", nil, wire.StatusActive, 0, nil},
		{"a disabled job: nothing runs", nil, wire.StatusDisabled, 3, nil},
		{"edit of a swept job: goes on where it was", &earlier, wire.StatusActive, 3, &earlier},
		{"edit no node took: the nodes still run the schedule", &earlier, wire.StatusFailed, 0, &earlier},
		{"disable of a swept job: kept", &earlier, wire.StatusDisabled, 3, &earlier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sweepAfterProvisioning(tc.swept, tc.status, tc.took, now)
			if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(*tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
