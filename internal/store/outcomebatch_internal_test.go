package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

// A batch locks its jobs in job id order, keeping the arrival order of one
// job's outcomes, and writes the operator's events by shard after them,
// only for outcomes newly recorded for a live job.
func TestBatchOrders(t *testing.T) {
	req := func(job, shard string) OutcomeRequest {
		return OutcomeRequest{JobID: job, Node: Node{ShardID: shard}, Outcome: Outcome{Result: wire.ResultPlatformError}}
	}
	for _, c := range []struct {
		name      string
		reqs      []OutcomeRequest
		answers   []OutcomeAnswer
		order     []int
		noteOrder []int
	}{
		{name: "one", reqs: []OutcomeRequest{req("a", "s1")}, answers: make([]OutcomeAnswer, 1), order: []int{0}, noteOrder: []int{0}},
		{name: "by job, one job's in arrival order",
			reqs:    []OutcomeRequest{req("c", "s1"), req("a", "s1"), req("c", "s1"), req("b", "s1"), req("a", "s1")},
			answers: make([]OutcomeAnswer, 5), order: []int{1, 4, 3, 0, 2}, noteOrder: []int{1, 4, 3, 0, 2}},
		{name: "notes by shard after the job order",
			reqs:    []OutcomeRequest{req("a", "s2"), req("b", "s1"), req("c", "s2"), req("d", "s1")},
			answers: make([]OutcomeAnswer, 4), order: []int{0, 1, 2, 3}, noteOrder: []int{1, 3, 0, 2}},
		{name: "no note for a failure, a duplicate or a deleted job",
			reqs: []OutcomeRequest{req("a", "s1"), req("b", "s1"), req("c", "s1"), req("d", "s1")},
			answers: []OutcomeAnswer{{Err: errors.New("refused")}, {Result: OutcomeResult{Duplicate: true}},
				{Result: OutcomeResult{Deleted: true}}, {}},
			order: []int{0, 1, 2, 3}, noteOrder: []int{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			order := outcomeOrder(c.reqs)
			if !slices.Equal(order, c.order) {
				t.Errorf("order %v, want %v", order, c.order)
			}
			if notes := operatorNoteOrder(c.reqs, order, c.answers); !slices.Equal(notes, c.noteOrder) {
				t.Errorf("operator notes %v, want %v", notes, c.noteOrder)
			}
		})
	}
}
