// Package runkey names one logical run of a cron job everywhere: in the
// runner's record, the outcome report and the run history.
package runkey

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// New returns {job}#{slot}#{version}, the slot in UTC to the second.
func New(jobID string, slot time.Time, version int64) string {
	return jobID + "#" + slot.UTC().Format(time.RFC3339) + "#" + strconv.FormatInt(version, 10)
}

// Parse splits a run key into its parts.
func Parse(key string) (jobID string, slot time.Time, version int64, err error) {
	parts := strings.Split(key, "#")
	if len(parts) != 3 {
		return "", time.Time{}, 0, fmt.Errorf("run key %q: want job#slot#version", key)
	}
	slot, err = time.Parse(time.RFC3339, parts[1])
	if err != nil || slot.Location() != time.UTC {
		return "", time.Time{}, 0, fmt.Errorf("run key %q: slot is not an RFC 3339 UTC time", key)
	}
	version, err = strconv.ParseInt(parts[2], 10, 64)
	if err != nil || version < 0 {
		return "", time.Time{}, 0, fmt.Errorf("run key %q: version is not a number", key)
	}
	return parts[0], slot, version, nil
}
