package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// SlotRecords reads the range's scheduled runs oldest first (not manual
// ones, not those outside it), the trail without run_now and cancel (with
// the create's enabled), and where the sweep stands; More says the range
// held more runs than asked for.
func TestSlotRecords(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	for i := 0; i < 4; i++ {
		f.outcome(j, base.Add(time.Duration(i)*time.Minute), wire.ResultSuccess)
	}
	if _, _, err := f.st.RunNow(ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	f.sweepFrom(j.ID, base)

	rec, err := f.st.SlotRecords(ctx, j.ID, base.Add(time.Minute), base.Add(3*time.Minute), 10)
	must(t, err)
	if len(rec.Runs) != 2 || !rec.Runs[0].ScheduledAt.Equal(base.Add(time.Minute)) || rec.More {
		t.Errorf("runs %+v more %v, want the slots at +1m and +2m", rec.Runs, rec.More)
	}
	if rec.SweptUntil == nil || !rec.SweptUntil.Equal(base) {
		t.Errorf("swept_until = %v, want %v", rec.SweptUntil, base)
	}
	var actions []string
	for _, e := range rec.Events {
		actions = append(actions, e.Action)
	}
	if len(actions) != 2 || actions[0] != "create" || actions[1] != "provisioned" {
		t.Errorf("trail %v, want create, provisioned (no run_now)", actions)
	}
	if len(rec.Events) > 0 && rec.Events[0].Detail["enabled"] != true {
		t.Errorf("create detail %v, want enabled: true", rec.Events[0].Detail)
	}

	rec, err = f.st.SlotRecords(ctx, j.ID, base, base.Add(time.Hour), 3)
	must(t, err)
	if len(rec.Runs) != 3 || !rec.More {
		t.Errorf("limit 3 of 4: %d runs, more %v", len(rec.Runs), rec.More)
	}
	if _, err := f.st.SlotRecords(ctx, "00000000-0000-0000-0000-000000000000", base, base.Add(time.Hour), 3); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v, want not found", err)
	}
}
