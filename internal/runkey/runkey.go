// Package runkey names one logical run of a cron job everywhere: in the
// runner's record, the outcome report and the run history.
//
// A key has exactly one spelling per run, so recording is idempotent by
// the key alone:
//
//	{job}#scheduled#{slot}   a timer's slot, RFC 3339 UTC to the second
//	{job}#manual#{request}   one run-now request, by the request's id
//
// The job's version is not part of the key: an edit between a slot and its
// report does not make the slot a second run.
package runkey

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Key is a parsed run key.
type Key struct {
	JobID   string
	Trigger wire.Trigger
	Slot    time.Time // scheduled runs only
	Request string    // manual runs only
}

// Scheduled returns the key of a timer's slot.
func Scheduled(jobID string, slot time.Time) string {
	return jobID + "#" + string(wire.TriggerScheduled) + "#" + slot.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// Manual returns the key of one run-now request.
func Manual(jobID, request string) string {
	return jobID + "#" + string(wire.TriggerManual) + "#" + request
}

// String spells the key.
func (k Key) String() string {
	if k.Trigger == wire.TriggerManual {
		return Manual(k.JobID, k.Request)
	}
	return Scheduled(k.JobID, k.Slot)
}

var requestRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidRequest reports whether id can name a run-now request.
func ValidRequest(id string) bool { return requestRE.MatchString(id) }

// Parse splits a run key into its parts. It accepts only the canonical
// spelling, so one run cannot be recorded under two keys.
func Parse(key string) (Key, error) {
	parts := strings.Split(key, "#")
	if len(parts) != 3 {
		return Key{}, fmt.Errorf("run key %q: want job#trigger#slot or job#manual#request", key)
	}
	if !wire.ValidID(parts[0]) {
		return Key{}, fmt.Errorf("run key %q: job is not a lower-case UUID", key)
	}
	k := Key{JobID: parts[0], Trigger: wire.Trigger(parts[1])}
	switch k.Trigger {
	case wire.TriggerScheduled:
		slot, err := time.Parse(time.RFC3339, parts[2])
		if err != nil {
			return Key{}, fmt.Errorf("run key %q: slot is not an RFC 3339 UTC time", key)
		}
		k.Slot = slot.UTC()
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
