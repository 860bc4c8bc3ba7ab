package core

import (
	"testing"
	"time"
)

func TestRunWindow(t *testing.T) {
	slot := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	started, finished := slot.Add(time.Second), slot.Add(40*time.Second)
	cases := []struct {
		name               string
		started, finished  *time.Time
		wantStart, wantEnd time.Time
	}{
		{"reported", &started, &finished, started.Add(-2 * time.Second), finished.Add(5 * time.Second)},
		{"no times: slot to timeout", nil, nil, slot.Add(-2 * time.Second), slot.Add(305 * time.Second)},
	}
	for _, c := range cases {
		s, e := runWindow(slot, c.started, c.finished, 300)
		if !s.Equal(c.wantStart) || !e.Equal(c.wantEnd) {
			t.Errorf("%s: [%v, %v], want [%v, %v]", c.name, s, e, c.wantStart, c.wantEnd)
		}
	}
}
