// Package runkey names one logical run of a cron job everywhere: in the
// runner's record, the outcome report and the run history.
//
// A key has exactly one spelling per run, so recording is idempotent by
// the key alone:
//
//	{job}#scheduled#{slot}   a timer's slot, RFC 3339 UTC to the second
//	{job}#manual#{request}   one run-now request, by the request's id
//	{job}#backfill#{slot}#{request}
//	                         one request to re-run a past slot: the slot it
//	                         stands for and the request, so a slot can be
//	                         backfilled again by another request
//	{job}#retry#{slot}#{attempt}
//	                         attempt 2 and later of a scheduled slot that
//	                         failed: one key per (slot, attempt), so a
//	                         duplicate outcome or a redelivered task can
//	                         never make two runs of one attempt
//
// The job's version is not part of the key: an edit between a slot and its
// report does not make the slot a second run.
package runkey

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Key is a parsed run key.
type Key struct {
	JobID   string
	Trigger wire.Trigger
	Slot    time.Time // scheduled, backfill and retry runs
	Request string    // manual and backfill runs
	Attempt int       // retry runs: 2 and later (Attempt() is 1 for every other run)
}

// Scheduled returns the key of a timer's slot.
func Scheduled(jobID string, slot time.Time) string {
	return jobID + "#" + string(wire.TriggerScheduled) + "#" + formatSlot(slot)
}

// Manual returns the key of one run-now request.
func Manual(jobID, request string) string {
	return jobID + "#" + string(wire.TriggerManual) + "#" + request
}

// Backfill returns the key of one request to re-run a past slot.
func Backfill(jobID string, slot time.Time, request string) string {
	return jobID + "#" + string(wire.TriggerBackfill) + "#" + formatSlot(slot) + "#" + request
}

// Retry returns the key of attempt (2 or later) of a scheduled slot.
func Retry(jobID string, slot time.Time, attempt int) string {
	return jobID + "#" + string(wire.TriggerRetry) + "#" + formatSlot(slot) + "#" + strconv.Itoa(attempt)
}

// MaxAttempt is the highest attempt a key may name: the scheduled run and
// wire.MaxRetries retries.
const MaxAttempt = 1 + wire.MaxRetries

func formatSlot(slot time.Time) string {
	return slot.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// String spells the key.
func (k Key) String() string {
	switch k.Trigger {
	case wire.TriggerManual:
		return Manual(k.JobID, k.Request)
	case wire.TriggerBackfill:
		return Backfill(k.JobID, k.Slot, k.Request)
	case wire.TriggerRetry:
		return Retry(k.JobID, k.Slot, k.Attempt)
	}
	return Scheduled(k.JobID, k.Slot)
}

// AttemptNumber is the run's attempt: a retry's, 1 for every other run.
func (k Key) AttemptNumber() int {
	if k.Trigger == wire.TriggerRetry {
		return k.Attempt
	}
	return 1
}

// RequestID is the id the runners elect a run started by a request under
// (the shared run-now stamp): a run-now's or backfill's request, and for a
// retry one made of its slot and attempt, the same on every node and for
// every delivery; "" for a scheduled run.
func (k Key) RequestID() string {
	switch k.Trigger {
	case wire.TriggerManual, wire.TriggerBackfill:
		return k.Request
	case wire.TriggerRetry:
		return "retry-" + strconv.FormatInt(k.Slot.Unix(), 10) + "-" + strconv.Itoa(k.Attempt)
	}
	return ""
}

// ByRequest reports whether the run is started by a request (run-now,
// backfill) rather than by a timer's slot: it is elected by its request
// id (the shared run-now stamp), never by the slot stamp.
func (k Key) ByRequest() bool {
	return k.Trigger == wire.TriggerManual || k.Trigger == wire.TriggerBackfill || k.Trigger == wire.TriggerRetry
}

var requestRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidRequest reports whether id can name a run-now request.
func ValidRequest(id string) bool { return requestRE.MatchString(id) }

// Parse splits a run key into its parts. It accepts only the canonical
// spelling, so one run cannot be recorded under two keys.
func Parse(key string) (Key, error) {
	parts := strings.Split(key, "#")
	if len(parts) < 3 || len(parts) > 4 ||
		(len(parts) == 4) != (parts[1] == string(wire.TriggerBackfill) || parts[1] == string(wire.TriggerRetry)) {
		return Key{}, fmt.Errorf("run key %q: want job#scheduled#slot, job#manual#request, job#backfill#slot#request or job#retry#slot#attempt", key)
	}
	if !wire.ValidID(parts[0]) {
		return Key{}, fmt.Errorf("run key %q: job is not a lower-case UUID", key)
	}
	k := Key{JobID: parts[0], Trigger: wire.Trigger(parts[1])}
	switch k.Trigger {
	case wire.TriggerScheduled, wire.TriggerBackfill, wire.TriggerRetry:
		slot, err := time.Parse(time.RFC3339, parts[2])
		if err != nil {
			return Key{}, fmt.Errorf("run key %q: slot is not an RFC 3339 UTC time", key)
		}
		k.Slot = slot.UTC()
		if k.Trigger == wire.TriggerBackfill {
			if len(parts) != 4 || !ValidRequest(parts[3]) {
				return Key{}, fmt.Errorf("run key %q: request id must be 1 to 64 of A-Z a-z 0-9 _ -", key)
			}
			k.Request = parts[3]
		}
		if k.Trigger == wire.TriggerRetry {
			n, err := strconv.Atoi(parts[3])
			if err != nil || n < 2 || n > MaxAttempt {
				return Key{}, fmt.Errorf("run key %q: attempt must be 2 to %d", key, MaxAttempt)
			}
			k.Attempt = n
		}
	case wire.TriggerManual:
		if !ValidRequest(parts[2]) {
			return Key{}, fmt.Errorf("run key %q: request id must be 1 to 64 of A-Z a-z 0-9 _ -", key)
		}
		k.Request = parts[2]
	default:
		return Key{}, fmt.Errorf("run key %q: unknown trigger %q", key, parts[1])
	}
	if k.String() != key {
		return Key{}, fmt.Errorf("run key %q: not canonical (want %q)", key, k.String())
	}
	return k, nil
}
