package store

import (
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestBackfillSlotError(t *testing.T) {
	now := time.Date(2026, 11, 23, 2, 20, 0, 0, time.UTC)
	created := now.Add(-10 * 24 * time.Hour)
	hourly, err := schedule.Parse("0 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	// 02:30 Berlin repeats on 2026-10-25: 00:30Z (CEST) fires, 01:30Z (CET) does not.
	berlin, err := schedule.Parse("30 2 * * *", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		sched   *schedule.Schedule
		slot    time.Time
		created time.Time
		now     time.Time
		ok      bool
	}{
		{"the last slot", hourly, time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC), created, now, true},
		{"a slot at now", hourly, now.Truncate(time.Hour).Add(time.Hour), created, now.Truncate(time.Hour).Add(time.Hour), true},
		{"the next slot", hourly, time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC), created, now, false},
		{"not a fire time", hourly, time.Date(2026, 11, 23, 1, 30, 0, 0, time.UTC), created, now, false},
		{"a week old", hourly, now.Truncate(time.Hour).Add(-wire.MaxBackfillAge + time.Hour), created, now, true},
		{"over a week old", hourly, now.Truncate(time.Hour).Add(-wire.MaxBackfillAge), created, now, false},
		{"at the creation", hourly, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), now, true},
		{"before the creation", hourly, time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 22, 0, 0, 1, 0, time.UTC), now, false},
		{"DST first pass", berlin, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 26, 0, 0, 0, 0, time.UTC), true},
		{"DST second pass", berlin, time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 26, 0, 0, 0, 0, time.UTC), false},
	} {
		err := backfillSlotError(tt.slot, tt.sched, tt.created, tt.now)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidSlot)) {
			t.Errorf("%s: %v, want ok=%v (ErrInvalidSlot when not)", tt.name, err, tt.ok)
		}
	}
}
