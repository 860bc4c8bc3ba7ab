package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// Stamp is the job's slot stamp on shared storage, beside the lock: the
// last scheduled slot started, and the lease of the run holding the lock.
type Stamp struct {
	Slot      time.Time `json:"slot"`      // last scheduled slot started on any node
	Holder    string    `json:"holder"`    // node of the run holding the lock
	RunKey    string    `json:"run_key"`   // the run holding the lock
	Heartbeat time.Time `json:"heartbeat"` // refreshed every HeartbeatEvery while it runs
	// Released: the run ended and let go of the lock, so a later holder
	// without a lease (a runner between lock and stamp, an operator's
	// flock) is not mistaken for a dead node.
	Released bool `json:"released,omitempty"`
	// Clock is what the writer knew of its own clock (judgeClock:
	// verified, off, unknown), for whoever reads the stamp.
	Clock string `json:"clock,omitempty"`
	// RanAhead are slots that ran on a node that could not vouch for its
	// clock, which may have been ahead: each such writer lists its own
	// slot, and a verified node that overwrites a runner's stamp lying more
	// than MaxSkew in the future lists that stamp's slot. A slot in it does
	// not run again when it comes (a verified node would otherwise run on
	// time a slot a fast node already ran early). Every writer carries the
	// list on (mergeRanAhead).
	RanAhead []RanAhead `json:"ran_ahead,omitempty"`
}

// RanAhead is one slot that ran ahead of time, and where.
type RanAhead struct {
	Slot time.Time `json:"slot"`
	Node string    `json:"node"`
}

// Bounds of Stamp.RanAhead.
const (
	// ranAheadKeep: a verified writer drops entries older than this; no
	// node contends for a slot that long after it (its fire window is
	// RandomizedDelaySec + FireMargin; a catch-up's is at most
	// wire.MaxCatchUpWindowSec, plus its wait).
	ranAheadKeep = wire.MaxCatchUpWindowSec*time.Second + time.Hour
	// ranAheadMax bounds the list, dropping the earliest: while verified
	// nodes run, a minutely job keeps at most an hour's worth; with none
	// (every agent cut off from the core) 128 minutes of slots.
	ranAheadMax = 128
)

// ranAhead returns the entry for slot, if it ran ahead of time.
func (st Stamp) ranAhead(slot time.Time) *RanAhead {
	for i := range st.RanAhead {
		if st.RanAhead[i].Slot.Equal(slot) {
			return &st.RanAhead[i]
		}
	}
	return nil
}

// isLeaseOf reports whether the stamp is a runner's lease of a run of job
// (not a corrupt or legacy stamp): its slot was stamped by a runner that
// ran it (or, for a run-now lease, carried on from the stamp before).
func (st Stamp) isLeaseOf(jobID string) bool {
	return st.Holder != "" && !st.Slot.IsZero() && strings.HasPrefix(st.RunKey, jobID+"#")
}

// mergeRanAhead is the RanAhead list a new stamp carries: the old one's,
// plus adds (nil ones skipped), sorted, without duplicates, bounded by
// ranAheadMax. Only a writer whose clock is verified drops entries by age
// (older than ranAheadKeep before its now): a fast writer's now would drop
// slots that have not yet come.
func mergeRanAhead(old []RanAhead, verified bool, now time.Time, adds ...*RanAhead) []RanAhead {
	out := slices.Clone(old)
	for _, a := range adds {
		if a != nil {
			out = append(out, *a)
		}
	}
	if verified {
		out = slices.DeleteFunc(out, func(r RanAhead) bool { return r.Slot.Before(now.Add(-ranAheadKeep)) })
	}
	slices.SortFunc(out, func(a, b RanAhead) int { return a.Slot.Compare(b.Slot) })
	out = slices.CompactFunc(out, func(a, b RanAhead) bool { return a.Slot.Equal(b.Slot) })
	if len(out) > ranAheadMax {
		out = out[len(out)-ranAheadMax:]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// readStamp loads the stamp. A missing stamp is ok=false; a stamp that
// cannot be read is an error (the caller fails closed); a stamp that does
// not parse is corrupt: ok=false and a warning, so the winner overwrites
// it. A stamp further ahead than MaxSkew (aheadOf) is ok=false with a
// warning too, but returned: the winner overwrites it only when its own
// clock is verified (judgeFutureStamp).
func readStamp(path string, now time.Time) (st Stamp, ok bool, warn string, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Stamp{}, false, "", nil
	}
	if err != nil {
		return Stamp{}, false, "", fmt.Errorf("read slot stamp: %w", err)
	}
	text := strings.TrimSpace(string(b))
	if t, perr := time.Parse(time.RFC3339, text); perr == nil {
		st = Stamp{Slot: t} // written before stamps carried a lease
	} else if jerr := json.Unmarshal(b, &st); jerr != nil {
		return Stamp{}, false, fmt.Sprintf("slot stamp %s is corrupt (%q), overwritten", path, truncate(text, 60)), nil
	}
	if aheadOf(st, now) {
		return st, false, fmt.Sprintf("slot stamp %s names %s, more than %s ahead of this node's clock: corrupt, overwritten",
			path, st.Slot.UTC().Format(time.RFC3339), MaxSkew), nil
	}
	return st, true, "", nil
}

// writeStamp records the stamp atomically and durably: the next node that
// gets the lock must see it.
func writeStamp(path string, st Stamp) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode slot stamp: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write slot stamp: %w", err)
	}
	return nil
}

// keepRequests is how many run-now request ids the manual stamp keeps: far
// more than can be pending at once.
const keepRequests = 32

// readDone loads the ids of the run-now requests already started. A stamp
// from before it held ids (a time) counts as none.
func readDone(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read run-now stamp: %w", err)
	}
	var done []string
	if json.Unmarshal(b, &done) != nil {
		return nil, nil
	}
	return done, nil
}

// writeDone appends id, keeping the last keepRequests ids.
func writeDone(path string, done []string, id string) error {
	done = append(slices.Clone(done), id)
	if len(done) > keepRequests {
		done = done[len(done)-keepRequests:]
	}
	b, _ := json.Marshal(done)
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write run-now stamp: %w", err)
	}
	return nil
}

// markerToken names a run in its skip marker: a slot's Unix seconds, or
// "m" and the request id.
func markerToken(d decision) string {
	if d.Trigger == wire.TriggerManual {
		return "m" + d.Request
	}
	return strconv.FormatInt(d.Slot.Unix(), 10)
}

func markerPath(dir, jobID string, d decision) string {
	return filepath.Join(dir, wire.SkipMarkerPrefix(jobID)+markerToken(d))
}

// createMarker claims the skip decision for d: exactly one node creates
// the marker (O_EXCL), even on a network filesystem.
func createMarker(dir, jobID string, d decision) (bool, error) {
	p := markerPath(dir, jobID, d)
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create skip marker %s: %w", p, err)
	}
	return true, unix.Close(fd)
}

// markerExists reports whether d was already decided a skip; an error
// reading it is an error (fail closed).
func markerExists(dir, jobID string, d decision) (bool, error) {
	_, err := os.Lstat(markerPath(dir, jobID, d))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("skip marker: %w", err)
}

// cleanMarkers removes markers of slots before slot, and of requests older
// than RequestTTL: none of them can be contended any more.
func cleanMarkers(dir, jobID string, slot, now time.Time) error {
	prefix := wire.SkipMarkerPrefix(jobID)
	names, err := filepath.Glob(filepath.Join(dir, prefix+"*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range names {
		tok := strings.TrimPrefix(filepath.Base(p), prefix)
		stale := false
		if sec, err := strconv.ParseInt(tok, 10, 64); err == nil {
			stale = time.Unix(sec, 0).Before(slot)
		} else if fi, err := os.Lstat(p); err == nil {
			stale = now.Sub(fi.ModTime()) > RequestTTL
		}
		if stale {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// readRequest returns the pending run-now request for unit, if any: the
// node agent writes "{request id}\n{request time RFC 3339}\n", and for a
// backfill or retry a third line, its run key (whose RequestID is the
// request id).
// A request that does not parse is none: an older runner reads a
// three-line request as none too, so it never runs a backfill as a
// run-now.
func readRequest(dir, unit string) *Request {
	if dir == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(dir, unit))
	if err != nil {
		return nil
	}
	return parseRequest(string(b))
}

// parseRequest reads a request file's text (readRequest).
func parseRequest(text string) *Request {
	lines := strings.Fields(text)
	if (len(lines) != 2 && len(lines) != 3) || !runkey.ValidRequest(lines[0]) {
		return nil
	}
	at, err := time.Parse(time.RFC3339, lines[1])
	if err != nil {
		return nil
	}
	req := &Request{ID: lines[0], At: at}
	if len(lines) == 3 {
		k, err := runkey.Parse(lines[2])
		if err != nil || (k.Trigger != wire.TriggerBackfill && k.Trigger != wire.TriggerRetry) || k.RequestID() != req.ID {
			return nil
		}
		req.Key = &k
	}
	return req
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// RequestDecided reports whether a run of the shard decided run-now
// request: it started it (the run-now stamp holds its id) or decided it a
// skip behind a running run (its marker exists). The node agent asks it,
// as root, to know whether a start of the job's service took the request.
// The lock dir is the tenant's, and so is its parent, where the tenant
// could put a symlink or another directory in its place: the lock dir is
// opened without following a link and must be owned by owner (the
// tenant's uid), and its files are looked at through that descriptor,
// never followed or waited on (a symlink, a FIFO), so what it says can
// only be the tenant's own request's loss.
func RequestDecided(lockDir string, owner int, jobID, request string) (bool, error) {
	dfd, err := unix.Open(lockDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open lock dir %s (a symlink is refused): %w", lockDir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return false, fmt.Errorf("stat lock dir %s: %w", lockDir, err)
	}
	if owner < 0 || st.Uid != uint32(owner) {
		return false, fmt.Errorf("lock dir %s is owned by uid %d, not the tenant's %d", lockDir, st.Uid, owner)
	}
	d := decision{Trigger: wire.TriggerManual, Request: request}
	marker := wire.SkipMarkerPrefix(jobID) + markerToken(d)
	switch err := unix.Fstatat(dfd, marker, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return true, nil
	case !errors.Is(err, unix.ENOENT):
		return false, fmt.Errorf("skip marker %s: %w", filepath.Join(lockDir, marker), err)
	}
	b, err := readTenantFileAt(dfd, lockDir, wire.ManualStampName(jobID))
	if err != nil || b == nil {
		return false, err
	}
	var done []string
	if json.Unmarshal(b, &done) != nil {
		return false, nil
	}
	return slices.Contains(done, request), nil
}

// maxTenantFile bounds what root reads of a file in the tenant's lock dir;
// the run-now stamp holds at most keepRequests short ids.
const maxTenantFile = 64 << 10

// readTenantFileAt reads a small regular file name in the directory dfd
// (dir names it in errors) without following a symlink or blocking on a
// FIFO; a missing file is nil.
func readTenantFileAt(dfd int, dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxTenantFile {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", path, maxTenantFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTenantFile))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
