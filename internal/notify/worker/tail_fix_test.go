package worker_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
)

// With a log store to read, a disable_warning is not attempted before its
// output can have arrived (TailSettle); an empty tail while it is young
// reschedules it once (TailPatience); then it goes out without one. No
// attempt is counted for the waits. Other kinds go at once.
func TestDisableWarningWaitsForOutput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rcv, tg := f.disableWarning()
	w := newWorker(f, true)
	w.Tail = fakeTail("")
	wantWaiting := func(step string, minWait time.Duration) {
		t.Helper()
		ds := f.deliveries(tg.ID)
		if rcv.count() != 0 || len(ds) != 1 || ds[0].State != "pending" || ds[0].Attempts != 0 ||
			time.Until(*ds[0].NextAttemptAt) < minWait {
			t.Fatalf("%s: %d sent, deliveries %+v, want one waiting at least %v", step, rcv.count(), ds, minWait)
		}
	}
	w.Pass(ctx)
	wantWaiting("fresh", 10*time.Second)
	f.age(20 * time.Second)
	f.due()
	w.Pass(ctx)
	wantWaiting("settled, tail empty", 30*time.Second)
	f.age(45 * time.Second)
	f.due()
	w.Pass(ctx)
	if rcv.count() != 1 {
		t.Fatalf("a minute old with no tail: %d sent, want it sent without", rcv.count())
	}
	var body struct {
		Data map[string]any `json:"data"`
	}
	must(t, json.Unmarshal(rcv.bodies[0], &body))
	if _, ok := body.Data["output_tail"]; ok {
		t.Errorf("an empty tail was sent: %s", rcv.bodies[0])
	}
	if ds := f.deliveries(tg.ID); ds[0].State != "delivered" || ds[0].Attempts != 1 {
		t.Errorf("after: %+v", ds[0])
	}
}

// panicTail is a log store whose reader panics.
type panicTail struct{}

func (panicTail) OutputTail(context.Context, store.Delivery) (string, error) {
	panic("tail reader bug")
}

// TestDeliveryPanicFailsTheDeliveryNotTheCore: a panic while delivering
// one event (here in the tail reader) neither ends the process nor leaves
// the row to panic on the next replica once its lease runs out: the
// delivery fails for good, and the tenant reads only that it failed
// internally.
func TestDeliveryPanicFailsTheDeliveryNotTheCore(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rcv, tg := f.disableWarning()
	f.age(90 * time.Second)
	w := newWorker(f, true)
	w.Tail = panicTail{}
	w.Pass(ctx)
	ds := f.deliveries(tg.ID)
	if rcv.count() != 0 || len(ds) != 1 || ds[0].State != "failed" || ds[0].LastError != "internal error while delivering" {
		t.Fatalf("after a panic: %d sent, deliveries %+v, want one failed with an internal error", rcv.count(), ds)
	}
}

// disableWarning is a webhook receiver subscribed to disable_warning and
// the failures that make one (the second of the fixture job's 3).
func (f *fixture) disableWarning() (*receiver, store.NotificationTarget) {
	f.t.Helper()
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	f.t.Cleanup(srv.Close)
	tg, err := f.st.CreateTarget(context.Background(), store.NotificationTarget{TenantID: f.tenant, Kind: "webhook",
		URL: srv.URL, Secret: "topsecret", Events: []string{"disable_warning"}})
	must(f.t, err)
	f.fail()
	f.fail()
	return rcv, tg
}
