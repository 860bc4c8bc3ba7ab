package api

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Cursors are opaque to clients: base64url of "kind.unix-nanoseconds.key",
// where kind tells a runs cursor ("r1", key the run's record id) from a
// jobs cursor ("j1", key the job's id), so one listing's cursor is never
// read as the other's. A cursor names the last item of a page; the next
// page starts after it, whatever was added meanwhile.
const (
	runCursorKind = "r1"
	jobCursorKind = "j1"
)

func encodeCursor(kind string, t time.Time, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "." + strconv.FormatInt(t.UnixNano(), 10) + "." + key))
}

// decodeCursor splits a cursor of kind into its time and key; ok is false
// for anything this server did not make.
func decodeCursor(kind, cursor string) (time.Time, string, bool) {
	if len(cursor) > 200 {
		return time.Time{}, "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return time.Time{}, "", false
	}
	parts := strings.Split(string(b), ".")
	if len(parts) != 3 || parts[0] != kind || parts[2] == "" {
		return time.Time{}, "", false
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, ns).UTC(), parts[2], true
}

// encodeRunCursor names the run after which the next page of runs starts.
func encodeRunCursor(p store.RunPos) string {
	return encodeCursor(runCursorKind, p.ScheduledAt, strconv.FormatInt(p.ID, 10))
}

// decodeRunCursor reads a runs cursor; ok is false for a bad one.
func decodeRunCursor(cursor string) (store.RunPos, bool) {
	t, key, ok := decodeCursor(runCursorKind, cursor)
	if !ok {
		return store.RunPos{}, false
	}
	id, err := strconv.ParseInt(key, 10, 64)
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != key {
		return store.RunPos{}, false
	}
	return store.RunPos{ScheduledAt: t, ID: id}, true
}

// encodeJobCursor names the job after which the next page of jobs starts.
func encodeJobCursor(p store.JobPos) string { return encodeCursor(jobCursorKind, p.CreatedAt, p.ID) }

// decodeJobCursor reads a jobs cursor; ok is false for a bad one.
func decodeJobCursor(cursor string) (store.JobPos, bool) {
	t, key, ok := decodeCursor(jobCursorKind, cursor)
	if !ok || !wire.ValidID(key) {
		return store.JobPos{}, false
	}
	return store.JobPos{CreatedAt: t, ID: key}, true
}

// checkText validates a short text for people (a job's name, a disable
// reason): UTF-8 of at most max characters, each printable (no control or
// format characters: no newline, tab, NUL, bidi override).
func checkText(field, s string, max int) error {
	if !utf8.ValidString(s) {
		return invalid(field, "must be UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > max {
		return invalid(field, "at most %d characters, got %d", max, n)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return invalid(field, "must be printable: no control or format characters (%U)", r)
		}
	}
	return nil
}
