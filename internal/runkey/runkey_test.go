package runkey

import (
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	slot := time.Date(2026, 11, 21, 10, 5, 0, 0, time.FixedZone("x", 3600))
	key := New("job-1", slot, 7)
	if key != "job-1#2026-11-21T09:05:00Z#7" {
		t.Fatalf("key = %q", key)
	}
	id, s, v, err := Parse(key)
	if err != nil || id != "job-1" || !s.Equal(slot) || v != 7 {
		t.Fatalf("Parse = %q %v %d %v", id, s, v, err)
	}
	for _, bad := range []string{"", "a#b", "a#2026-11-21T09:05:00Z#x", "a#2026-11-21T09:05:00+01:00#1", "a#b#c#d", "a#2026-11-21T09:05:00Z#-1"} {
		if _, _, _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
