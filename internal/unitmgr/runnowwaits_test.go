package unitmgr

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// The budget of long waits: per tenant, then per node; a place given back
// (once, however often its release is called) can be taken again.
func TestRunNowWaitsBudget(t *testing.T) {
	var w runNowWaits
	var releases []func()
	for range maxRunNowWaitsPerTenant {
		r, err := w.take("acme")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := w.take("acme"); err == nil || !strings.Contains(err.Error(), "tenant acme") {
		t.Fatalf("acme's %dth wait: %v, want refused naming the tenant", maxRunNowWaitsPerTenant+1, err)
	}
	releases[0]()
	releases[0]() // a second call gives back nothing more
	if _, err := w.take("acme"); err != nil {
		t.Fatalf("after one place was given back: %v", err)
	}
	if _, err := w.take("acme"); err == nil {
		t.Fatal("one release gave back two places")
	}
	// Other tenants fill the node's budget; then no one gets a place.
	for i := 0; w.total < maxRunNowWaits; i++ {
		if _, err := w.take("t" + string(rune('a'+i/maxRunNowWaitsPerTenant))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.take("newcomer"); err == nil || !strings.Contains(err.Error(), "already wait on this node") {
		t.Fatalf("a wait past the node's budget: %v, want refused", err)
	}
}

// A tenant whose run-nows already wait long on this node for their jobs'
// runs (maxRunNowWaitsPerTenant of them) cannot make one more hold an
// activity slot for the request's TTL: it gives up after the short
// grace, with ErrRunNowNotTaken, so the core asks the next node. So one
// tenant's long runs cannot fill the agent's slots and hold back other
// tenants' cancels, run-nows and converges on the node. Another tenant's
// request behind a run still waits.
func TestRunNowBehindARunWaitsLongOnlyWithinTheBudget(t *testing.T) {
	f := &fakeService{active: "activating"} // the job's own long run on this node
	m, spec, _ := runNowNode(t, f)
	for range maxRunNowWaitsPerTenant { // the tenant's other jobs' requests
		if _, err := m.waits.take(spec.Tenant); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	now := start
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Second); return now }
	unit := wire.UnitName(spec.Tenant, spec.ID)
	err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "8"})
	mu.Lock()
	held := now.Sub(start)
	mu.Unlock()
	if !errors.Is(err, wire.ErrRunNowNotTaken) || !strings.Contains(err.Error(), "tenant "+spec.Tenant) {
		t.Fatalf("err %v: want ErrRunNowNotTaken naming the tenant's waits", err)
	}
	if held > runNowWaitGrace+5*time.Second || f.starts != 0 {
		t.Errorf("the request held its slot %v (grace %v) and started the service %d times", held, runNowWaitGrace, f.starts)
	}

	// Another tenant's request behind its job's run waits as before: to
	// the TTL's margin here, since that run never ends.
	m.waits = runNowWaits{}
	now = start
	err = m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "9"})
	mu.Lock()
	held = now.Sub(start)
	mu.Unlock()
	if !errors.Is(err, wire.ErrRunNowNotTaken) || !strings.Contains(err.Error(), "still runs") || held < wire.RunNowTTL-runNowMargin {
		t.Errorf("with places free: err %v after %v, want the wait to the TTL's margin", err, held)
	}
	if m.waits.total != 0 {
		t.Errorf("%d places still taken after the request ended", m.waits.total)
	}
}
