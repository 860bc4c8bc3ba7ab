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

func TestBackfillRoundTrip(t *testing.T) {
	slot := time.Date(2026, 11, 21, 10, 5, 0, 0, time.FixedZone("x", 3600))
	key := Backfill(job, slot, "4711")
	if key != job+"#backfill#2026-11-21T09:05:00Z#4711" {
		t.Fatalf("key = %q", key)
	}
	k, err := Parse(key)
	if err != nil || k.Trigger != wire.TriggerBackfill || k.Request != "4711" || !k.Slot.Equal(slot) || !k.ByRequest() {
		t.Fatalf("Parse(%q) = %+v %v", key, k, err)
	}
	if k.String() != key {
		t.Fatalf("String() = %q, want %q", k.String(), key)
	}
}

func TestRetryRoundTrip(t *testing.T) {
	slot := time.Date(2026, 11, 21, 10, 5, 0, 0, time.FixedZone("x", 3600))
	key := Retry(job, slot, 3)
	if key != job+"#retry#2026-11-21T09:05:00Z#3" {
		t.Fatalf("key = %q", key)
	}
	k, err := Parse(key)
	if err != nil || k.Trigger != wire.TriggerRetry || k.Attempt != 3 || k.AttemptNumber() != 3 || !k.Slot.Equal(slot) || !k.ByRequest() {
		t.Fatalf("Parse(%q) = %+v %v", key, k, err)
	}
	if k.String() != key || k.RequestID() != "retry-1795251900-3" || !ValidRequest(k.RequestID()) {
		t.Fatalf("String() = %q, RequestID() = %q", k.String(), k.RequestID())
	}
	if other, _ := Parse(Retry(job, slot, 4)); other.RequestID() == k.RequestID() {
		t.Error("two attempts share a request id")
	}
}

func TestAttemptNumber(t *testing.T) {
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	for key, want := range map[string]int{
		Scheduled(job, slot):         1,
		Manual(job, "1"):             1,
		Backfill(job, slot, "1"):     1,
		Retry(job, slot, 2):          2,
		Retry(job, slot, MaxAttempt): MaxAttempt,
	} {
		k, err := Parse(key)
		if err != nil || k.AttemptNumber() != want {
			t.Errorf("Parse(%q).AttemptNumber() = %d (%v), want %d", key, k.AttemptNumber(), err, want)
		}
	}
}

func TestByRequest(t *testing.T) {
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	for key, want := range map[string]bool{
		Scheduled(job, slot):     false,
		Manual(job, "1"):         true,
		Backfill(job, slot, "1"): true,
		Retry(job, slot, 2):      true,
	} {
		k, err := Parse(key)
		if err != nil || k.ByRequest() != want {
			t.Errorf("Parse(%q).ByRequest() = %v (%v), want %v", key, k.ByRequest(), err, want)
		}
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
		job + "#manual#", job + "#manual#a/b",
		job + "#backfill#2026-11-21T09:05:00Z",        // no request
		job + "#backfill#2026-11-21T09:05:00Z#",       // empty request
		job + "#backfill#2026-11-21T09:05:00Z#a/b",    // bad request
		job + "#backfill#2026-11-21T09:05:00+01:00#7", // another zone
		job + "#backfill#7#2026-11-21T09:05:00Z",      // parts swapped
		job + "#backfill#2026-11-21T09:05:00Z#7#8",    // a part more
		job + "#scheduled#2026-11-21T09:05:00Z#7",     // a request on a slot
		job + "#manual#7#8",                           // a part more
		job + "#manual#" + string(make([]byte, 65)),
		job + "#retry#2026-11-21T09:05:00Z",                                   // no attempt
		job + "#retry#2026-11-21T09:05:00Z#1",                                 // attempt 1 is the scheduled run
		job + "#retry#2026-11-21T09:05:00Z#12",                                // over MaxAttempt
		job + "#retry#2026-11-21T09:05:00Z#02",                                // leading zero
		job + "#retry#2026-11-21T09:05:00Z#+2",                                // sign
		job + "#retry#2026-11-21T09:05:00Z#x",                                 // not a number
		job + "#retry#2026-11-21T09:05:00+01:00#2",                            // another zone
		job + "#retry#2026-11-21T09:05:00Z#2#3",                               // a part more
		"0B6F4C1E-8A53-4C8E-9D7E-3F1F0E2A9B10#scheduled#2026-11-21T09:05:00Z", // upper-case job
		"job-1#scheduled#2026-11-21T09:05:00Z",
	} {
		if k, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted: %+v", bad, k)
		}
	}
}
