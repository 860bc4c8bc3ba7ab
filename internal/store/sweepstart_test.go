package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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

func TestProvisionedVerdict(t *testing.T) {
	for _, tc := range []struct {
		name        string
		status      wire.Status
		took, nodes int
		wantStatus  wire.Status
		wantNoNode  bool
		wantTook    int
	}{
		{"every node took it", wire.StatusActive, 3, 3, wire.StatusActive, false, 3},
		{"a shard without nodes: no node runs it, failed", wire.StatusActive, 0, 0, wire.StatusFailed, true, 0},
		{"a worker from before took (decoded 0): active meant every node", wire.StatusActive, 0, 2, wire.StatusActive, false, 2},
		{"failed on every node stays failed", wire.StatusFailed, 0, 2, wire.StatusFailed, false, 0},
		{"failed on some nodes stays failed", wire.StatusFailed, 1, 2, wire.StatusFailed, false, 1},
		{"disabled without nodes: nothing runs anyway", wire.StatusDisabled, 0, 0, wire.StatusDisabled, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, msg, took := provisionedVerdict(tc.status, "as reported", tc.took, tc.nodes)
			if status != tc.wantStatus || took != tc.wantTook || (msg == NoNodeMessage) != tc.wantNoNode {
				t.Errorf("got %s %q took %d, want %s (no-node message %v) took %d", status, msg, took, tc.wantStatus, tc.wantNoNode, tc.wantTook)
			}
			// An active job runs on a node, so its sweep has started.
			if status == wire.StatusActive && sweepAfterProvisioning(nil, status, took, time.Now()) == nil {
				t.Errorf("active with the sweep not started")
			}
		})
	}
}

func TestSweepAfterOutcome(t *testing.T) {
	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	slot := now.Add(-10 * time.Minute)
	earlier := now.Add(-time.Hour)
	later := now.Add(time.Minute)
	for _, tc := range []struct {
		name         string
		swept        *time.Time
		version, cur int64
		slot         time.Time
		want         *time.Time
	}{
		{"a run of the current version starts the sweep at its slot", nil, 4, 4, slot, &slot},
		{"a slot a node claims in the future: now at the latest", nil, 4, 4, later, &now},
		{"a run of an older version proves nothing of the current schedule", nil, 3, 4, slot, nil},
		{"a started sweep goes on where it was", &earlier, 4, 4, slot, &earlier},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sweepAfterOutcome(tc.swept, tc.version, tc.cur, tc.slot, now)
			if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(*tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSkipJob(t *testing.T) {
	lockTimeout := fmt.Errorf("sweep j: lock job: %w", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"})
	statementTimeout := fmt.Errorf("sweep j: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"swept", context.Background(), nil, false},
		{"a schedule that does not parse", context.Background(), fmt.Errorf("sweep j: %w", errBadSchedule), true},
		{"a deadlock's victim", context.Background(), fmt.Errorf("sweep: record lost runs: %w", &pgconn.PgError{Code: "40P01"}), true},
		{"a row locked past lock_timeout", context.Background(), lockTimeout, true},
		{"a statement past statement_timeout", context.Background(), statementTimeout, true},
		{"another database error ends the sweep", context.Background(), &pgconn.PgError{Code: "08006"}, false},
		{"a broken connection ends the sweep", context.Background(), errors.New("conn closed"), false},
		{"a cancelled duty ends the sweep, whatever the error", cancelled, statementTimeout, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := skipJob(tc.ctx, tc.err); got != tc.want {
				t.Errorf("skipJob = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSweepFrom(t *testing.T) {
	swept := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	verdict := swept.Add(10 * time.Minute)
	notBefore := swept.Add(-time.Hour)
	for _, tc := range []struct {
		name      string
		swept     *time.Time
		status    wire.Status
		notBefore time.Time
		hasNode   bool
		want      time.Time
		wantOK    bool
	}{
		{"a started sweep goes on", &swept, wire.StatusActive, notBefore, true, swept, true},
		{"never before not_before", &swept, wire.StatusFailed, verdict.Add(time.Hour), true, verdict.Add(time.Hour), true},
		{"no node has the current schedule: not swept", nil, wire.StatusFailed, notBefore, true, time.Time{}, false},
		{"pending: not swept", nil, wire.StatusPending, notBefore, true, time.Time{}, false},
		{"active by an old replica: from its verdict", nil, wire.StatusActive, notBefore, true, verdict, true},
		{"active by an old replica on a shard without nodes: nothing runs it", nil, wire.StatusActive, notBefore, false, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sweepFrom(tc.swept, tc.status, verdict, tc.notBefore, tc.hasNode)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Errorf("got %v %v, want %v %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestSweepHorizon: how long after its slot a run should have ended, by
// the job's timeout, catch-up window and overlap policy: a buffer_one or
// cancel_previous slot may wait for the previous run (jobspec.StartWaitSec)
// before it runs for up to its timeout.
func TestSweepHorizon(t *testing.T) {
	for _, tt := range []struct {
		name            string
		timeout, window int
		policy          wire.OverlapPolicy
		want            time.Duration
	}{
		{"skip: the timeout", 60, 0, wire.OverlapSkip, 60 * time.Second},
		{"absent policy is skip", 60, 0, "", 60 * time.Second},
		{"catch-up window", 60, 600, wire.OverlapSkip, 660 * time.Second},
		// 60 + the wait: 60 (the previous run) + 10 + 30 + 120 + 60.
		{"buffer_one", 60, 0, wire.OverlapBufferOne, (60 + 280) * time.Second},
		{"cancel_previous", 60, 0, wire.OverlapCancelPrevious, (60 + 280) * time.Second},
		{"buffer_one with a window", 60, 600, wire.OverlapBufferOne, (60 + 600 + 280) * time.Second},
	} {
		if got := sweepHorizon(tt.timeout, tt.window, tt.policy); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
