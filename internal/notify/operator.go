package notify

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Operator event kinds: shard-level faults for the platform's operators,
// never sent to a tenant's target.
const (
	PlatformError    Kind = "platform_error"     // a run's outcome was platform_error
	NodeNotConverged Kind = "node_not_converged" // a node's converge failed or is overdue
	SlotsUnrun       Kind = "slots_unrun"        // the sweeper recorded lost runs
)

// OperatorKinds are the kinds an operator target may subscribe to.
var OperatorKinds = []Kind{PlatformError, NodeNotConverged, SlotsUnrun}

// OperatorWindow is the aggregation window of operator events: one event
// per shard, kind and window, however many occurrences fall into it. A
// shard-wide fault (shared storage down) makes one platform_error per
// outcome of every job of the shard; ten minutes tells an operator within
// minutes and costs a receiver at most 6 events an hour per shard and kind.
const OperatorWindow = 10 * time.Minute

// MaxExamples bounds the occurrences an operator event lists (the first
// ones of its window); the count covers all of them.
const MaxExamples = 5

// WindowStart is the start of the aggregation window holding t (windows
// are aligned to the Unix epoch, so every core agrees on them).
func WindowStart(t time.Time) time.Time { return t.UTC().Truncate(OperatorWindow) }

// OperatorKey is an operator event's dedupe key within its shard: the
// kind and the start of its window. It goes into the event's run_key.
func OperatorKey(k Kind, at time.Time) string {
	return string(k) + "@" + WindowStart(at).Format(time.RFC3339)
}

// OutcomeOperatorKind is the operator event a recorded outcome emits:
// platform_error for a platform_error newly recorded, none otherwise (a
// redelivery adds nothing; a tenant failure is the tenant's business).
func OutcomeOperatorKind(r Recorded) (Kind, bool) {
	if r.Duplicate || r.Result != wire.ResultPlatformError {
		return "", false
	}
	return PlatformError, true
}

// ShardCount is a number of occurrences on one shard.
type ShardCount struct {
	ShardID string
	Count   int
}

// UnrunShards is the slots_unrun occurrences of one sweep: the shards
// whose lost runs the sweep wrote, with how many, in shard order (a
// stable order, so transactions lock event rows alike).
func UnrunShards(lostByShard map[string]int) []ShardCount {
	var out []ShardCount
	for s, n := range lostByShard {
		if n > 0 && s != "" {
			out = append(out, ShardCount{ShardID: s, Count: n})
		}
	}
	slices.SortFunc(out, func(a, b ShardCount) int { return cmp.Compare(a.ShardID, b.ShardID) })
	return out
}

// NodeConvergence is what the store knows of a node's convergence.
type NodeConvergence struct {
	NodeID, ShardID, Name string
	Draining              bool
	// WatchedFrom is when the node's converges began to be recorded: its
	// creation, or the upgrade that began recording them.
	WatchedFrom time.Time
	ConvergedAt *time.Time // the last successful converge
	FailedAt    *time.Time // the last failed one
	Error       string     // its error
}

// ConvergeThreshold is how long a node may go without a successful
// converge before it is reported: three periodic converges (every 10
// minutes) missed.
const ConvergeThreshold = 30 * time.Minute

// NotConverged says whether a node is not converged at now, and why: its
// last converge failed (a success since clears it), or it has not
// converged for longer than threshold (never, since WatchedFrom). A
// draining node is leaving and is not reported.
func NotConverged(n NodeConvergence, now time.Time, threshold time.Duration) (string, bool) {
	if n.Draining {
		return "", false
	}
	if n.FailedAt != nil && (n.ConvergedAt == nil || n.FailedAt.After(*n.ConvergedAt)) {
		return "converge failed: " + n.Error, true
	}
	if n.ConvergedAt == nil {
		if since := now.Sub(n.WatchedFrom); since > threshold {
			return fmt.Sprintf("no converge recorded in %s", since.Round(time.Second)), true
		}
		return "", false
	}
	if since := now.Sub(*n.ConvergedAt); since > threshold {
		return fmt.Sprintf("last converged %s ago", since.Round(time.Second)), true
	}
	return "", false
}
