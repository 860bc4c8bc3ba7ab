package notify

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestOutcomeOperatorKind(t *testing.T) {
	for _, c := range []struct {
		name string
		r    Recorded
		want bool
	}{
		{"platform error", Recorded{Result: wire.ResultPlatformError}, true},
		{"redelivered platform error", Recorded{Result: wire.ResultPlatformError, Duplicate: true}, false},
		{"tenant failure", Recorded{Result: wire.ResultExitCode, Failure: true}, false},
		{"lost (the sweeper reports it per shard)", Recorded{Result: wire.ResultLost}, false},
		{"success", Recorded{Result: wire.ResultSuccess}, false},
	} {
		k, ok := OutcomeOperatorKind(c.r)
		if ok != c.want || (ok && k != PlatformError) {
			t.Errorf("%s: %q %v, want %v", c.name, k, ok, c.want)
		}
	}
}

func TestOperatorKeyAggregatesAWindow(t *testing.T) {
	at := time.Date(2026, 11, 22, 19, 31, 5, 0, time.FixedZone("x", 3600))
	for _, c := range []struct {
		at   time.Time
		same bool
	}{
		{at.Add(3 * time.Minute), true},   // 18:34 UTC: the same window
		{at.Add(-61 * time.Second), true}, // 18:30:04
		{at.Add(-66 * time.Second), false},
		{at.Add(9 * time.Minute), false}, // 18:40:05
	} {
		if got := OperatorKey(PlatformError, c.at) == OperatorKey(PlatformError, at); got != c.same {
			t.Errorf("%s and %s: same key %v, want %v", c.at, at, got, c.same)
		}
	}
	if got, want := OperatorKey(SlotsUnrun, at), "slots_unrun@2026-11-22T18:30:00Z"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	if OperatorKey(SlotsUnrun, at) == OperatorKey(PlatformError, at) {
		t.Error("two kinds share a key")
	}
}

func TestUnrunShards(t *testing.T) {
	got := UnrunShards(map[string]int{"b": 3, "a": 1, "c": 0, "": 4})
	want := []ShardCount{{"a", 1}, {"b", 3}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%v, want %v", got, want)
		}
	}
	if UnrunShards(nil) != nil {
		t.Error("no lost runs, yet occurrences")
	}
}

func TestNotConverged(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	old := now.Add(-24 * time.Hour)
	for _, c := range []struct {
		name string
		n    NodeConvergence
		want bool
	}{
		{"converged recently", NodeConvergence{WatchedFrom: old, ConvergedAt: ago(5 * time.Minute)}, false},
		{"converged too long ago", NodeConvergence{WatchedFrom: old, ConvergedAt: ago(31 * time.Minute)}, true},
		{"at the threshold", NodeConvergence{WatchedFrom: old, ConvergedAt: ago(30 * time.Minute)}, false},
		{"failed after the last success", NodeConvergence{WatchedFrom: old, ConvergedAt: ago(20 * time.Minute), FailedAt: ago(time.Minute), Error: "timeout"}, true},
		{"succeeded after a failure", NodeConvergence{WatchedFrom: old, ConvergedAt: ago(time.Minute), FailedAt: ago(20 * time.Minute)}, false},
		{"failed, never converged", NodeConvergence{WatchedFrom: now.Add(-time.Minute), FailedAt: ago(time.Second)}, true},
		{"new (or just upgraded), not yet converged", NodeConvergence{WatchedFrom: now.Add(-time.Minute)}, false},
		{"never converged", NodeConvergence{WatchedFrom: now.Add(-time.Hour)}, true},
		{"draining", NodeConvergence{WatchedFrom: old, Draining: true, FailedAt: ago(time.Second)}, false},
	} {
		reason, got := NotConverged(c.n, now, ConvergeThreshold)
		if got != c.want || (got && reason == "") {
			t.Errorf("%s: %v (%q), want %v", c.name, got, reason, c.want)
		}
	}
}
