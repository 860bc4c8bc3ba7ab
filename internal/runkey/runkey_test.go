package runkey

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

const job = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"

func TestScheduledRoundTrip(t *testing.T) {
	slot := time.Date(2026, 11, 21, 10, 5, 0, 0, time.FixedZone("x", 3600))
	key := Scheduled(job, slot)
	if key != job+"#scheduled#2026-11-21T09:05:00Z" {
		t.Fatalf("key = %q", key)
	}
	k, err := Parse(key)
	if err != nil || k.JobID != job || k.Trigger != wire.TriggerScheduled || !k.Slot.Equal(slot) {
		t.Fatalf("Parse = %+v %v", k, err)
	}
}

func TestManualRoundTrip(t *testing.T) {
	key := Manual(job, "4711")
	k, err := Parse(key)
	if err != nil || k.Trigger != wire.TriggerManual || k.Request != "4711" || !k.Slot.IsZero() {
		t.Fatalf("Parse(%q) = %+v %v", key, k, err)
	}
}

// Every other spelling of a slot is refused, so one slot has one key.
func TestParseRefusesNonCanonical(t *testing.T) {
	for _, bad := range []string{
		"", "a#b", job + "#scheduled", job + "#scheduled#2026-11-21T09:05:00Z#7",
		job + "#scheduled#2026-11-21T09:05:00+01:00", // another zone
		job + "#scheduled#2026-11-21T09:05:00.000Z",  // fraction
		job + "#scheduled#2026-11-21t09:05:00z",      // lower case
		job + "#Scheduled#2026-11-21T09:05:00Z",      // trigger case
		job + "#catchup#2026-11-21T09:05:00Z",        // unknown trigger
		job + "#manual#", job + "#manual#a/b", job + "#manual#" + string(make([]byte, 65)),
		"0B6F4C1E-8A53-4C8E-9D7E-3F1F0E2A9B10#scheduled#2026-11-21T09:05:00Z", // upper-case job
		"job-1#scheduled#2026-11-21T09:05:00Z",
	} {
		if k, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted: %+v", bad, k)
		}
	}
}
