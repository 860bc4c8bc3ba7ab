package unitmgr

import (
	"fmt"
	"sync"
	"time"
)

// A run-now request that finds its job's service busy (a run of the job
// under way on this node) waits for that run to end, up to the request's
// TTL, and its RunNow activity holds one of the agent's activity slots
// (cmd/node-agent activitySlots, 128) all that time. Run-nows of
// different jobs wait side by side, and the core asks a shard's nodes in
// one order, so without a bound one tenant with many long runs on one
// node could hold every slot there, and every other tenant's cancels,
// run-nows and converges on that node would wait behind it. So a long
// wait takes a place from a small budget, per tenant and per node; a
// request that finds none gives up here at once, and the core hands it
// to the next node, where the held lock makes it overlap_skipped,
// reported (as a request that reached that node first would be).
const (
	// runNowWaitGrace is how long a request may wait without a place:
	// its own start being elected, or a run about to end.
	runNowWaitGrace = 10 * time.Second
	// maxRunNowWaitsPerTenant bounds one tenant's long waits on a node.
	maxRunNowWaitsPerTenant = 4
	// maxRunNowWaits bounds all tenants' long waits on a node: a quarter
	// of the agent's activity slots, so that many tenants together still
	// leave the rest to the node's other work.
	maxRunNowWaits = 32
)

// runNowWaits counts the long waits under way on this node.
type runNowWaits struct {
	mu       sync.Mutex
	byTenant map[string]int
	total    int
}

// take gives tenant a place for a long wait and the func that gives it
// back, or an error saying which bound is full.
func (w *runNowWaits) take(tenant string) (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.byTenant[tenant] >= maxRunNowWaitsPerTenant:
		return nil, fmt.Errorf("%d run-now requests of tenant %s already wait on this node for their jobs' runs to end", w.byTenant[tenant], tenant)
	case w.total >= maxRunNowWaits:
		return nil, fmt.Errorf("%d run-now requests already wait on this node for their jobs' runs to end", w.total)
	}
	if w.byTenant == nil {
		w.byTenant = map[string]int{}
	}
	w.byTenant[tenant]++
	w.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.byTenant[tenant]--; w.byTenant[tenant] == 0 {
				delete(w.byTenant, tenant)
			}
			w.total--
		})
	}, nil
}
