package workflows

import (
	"testing"

	"go.temporal.io/sdk/worker"
)

// Histories of ConvergeNode recorded from the code before paged desired
// sets (commit 81d34cb, against temporal-dev): one complete, one cut off
// while the node's Reconcile was under way, as a worker upgraded in the
// middle of a converge finds it. The new code must replay both without a
// nondeterminism error: the pagedChange gate sends such runs down their
// old path (DesiredSetForNode, then Reconcile).
func TestConvergeNodeReplaysHistoriesFromBeforePaging(t *testing.T) {
	for _, file := range []string{"testdata/converge-before-paging.json", "testdata/converge-before-paging-midflight.json"} {
		t.Run(file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(ConvergeNode)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
				t.Errorf("replay %s: %v", file, err)
			}
		})
	}
}
