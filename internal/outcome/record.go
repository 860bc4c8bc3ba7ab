package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// The run record lives in the service's runtime directory, which the
// tenant's user owns: the tenant's command can replace it with anything
// (a symlink to /etc/shadow, a FIFO, a huge file, a record of another job
// or of a slot that never was). cron-outcome runs as root, so the record is
// read here as hostile input, and a record that fails any check is dropped:
// the hook then reports what systemd saw instead.

// MaxRecordSize bounds the record file; the runner writes a few KiB (its
// output tail, 4 KiB, escaped by JSON at most 6 bytes a byte: 24 KiB).
const MaxRecordSize = 64 << 10

// Bounds on a record's times relative to now.
const (
	// FutureSkew is how far ahead of the hook's clock a slot or a start may lie.
	FutureSkew = 2 * time.Minute
	// SupersedeSkew is how far ahead of the hook's clock a record's
	// superseded_by may lie. The runner stops its command when that slot
	// comes by its own clock, and the hook runs on the same node right
	// after it (the same clock): only the hook's own start lies between.
	// FutureSkew (minutes, for slots judged across nodes) would let a
	// tenant relabel its failing run cancelled up to two minutes before
	// the next slot came, a stop that never happened.
	SupersedeSkew = 5 * time.Second
	// MaxRunAge is how far back a slot may lie: a run never reports later
	// (the API caps timeout_seconds at a day; a catch-up starts at most
	// wire.MaxCatchUpWindowSec, a day, after its slot; its start may then
	// wait up to jobspec.StartWaitSec, for buffer_one and cancel_previous
	// a timeout (a day) and 220 s, for the previous run; then the command
	// runs up to its timeout; then systemd's stop, TimeoutStopSec, and the
	// hook itself): 72 h and about 4 minutes, so an hour over 72 h.
	// TestMaxRunAgeCoversTheLongestRun holds it to that sum.
	MaxRunAge = 73 * time.Hour
)

// MaxReason bounds the runner's reason, warning and node name, leaving
// room in failure_reason.
const MaxReason = 1024

// ErrBadRecord marks a record that is missing, unsafe to read, or names
// no run the hook can trust.
var ErrBadRecord = errors.New("run record refused")

// ErrBadDetails marks a record whose run checks out but whose account of
// the run does not.
var ErrBadDetails = errors.New("run record details refused")

// Expect is what the hook knows from trusted sources (the unit's
// environment, the root-only job specs) and holds the record against.
type Expect struct {
	JobID string
	UID   int         // the unit's user: the record's owner
	Specs []KnownSpec // the job's spec and the ones the agent kept (jobspec.KeepReplaced)
	Now   time.Time
}

// KnownSpec is one version of the job's spec as the hook read it from
// root's spec dir.
type KnownSpec struct {
	Version int64
	Fires   func(time.Time) bool // whether t is a fire time of its schedule
	// OverlapPolicy is the spec's (skip when it names none): only a
	// cancel_previous job's run may say the next slot superseded it.
	OverlapPolicy wire.OverlapPolicy
}

// specFor returns the spec a run of version v started under: the known
// spec of the smallest version at or above v. The agent keeps a spec only
// when a change of schedule, time zone or overlap policy (or a delete)
// replaces it (jobspec.NeedsKeeping), so the versions between two kept
// specs share the later one's schedule and policy.
func specFor(specs []KnownSpec, v int64) (KnownSpec, bool) {
	var best KnownSpec
	found := false
	for _, s := range specs {
		if s.Version >= v && (!found || s.Version < best.Version) {
			best, found = s, true
		}
	}
	return best, found
}

// ReadRecord opens dir/record.json safely and validates it. An error
// wrapping ErrBadRecord means the record names no run the hook can
// trust; ErrBadDetails means the run it names (key, slot, version) checks
// out but other values do not: the record returned then holds only the
// run's identity, and the caller reports what systemd saw.
func ReadRecord(dir string, want Expect) (runner.Record, error) {
	b, err := readOwnedFile(dir, runner.RecordFile, want.UID)
	if err != nil {
		return runner.Record{}, err
	}
	var r runner.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return runner.Record{}, fmt.Errorf("%w: decode: %v", ErrBadRecord, err)
	}
	if runner.Silent(r.Kind) {
		// Nothing is reported for it, unless systemd saw the runner run
		// the command (HoldToSystemd): then the run's identity, if it
		// checks out, names the run that is reported instead.
		if validateIdentity(r, want) == nil {
			return runner.Record{Kind: r.Kind, RunKey: r.RunKey, Slot: r.Slot, Version: r.Version, Trigger: r.Trigger, Node: r.Node}, nil
		}
		return runner.Record{Kind: r.Kind}, nil
	}
	if err := validateIdentity(r, want); err != nil {
		return runner.Record{}, err
	}
	if err := validateDetails(r, want); err != nil {
		return runner.Record{RunKey: r.RunKey, Slot: r.Slot, Version: r.Version, Trigger: r.Trigger}, err
	}
	return r, nil
}

// readOwnedFile reads name in dir only if it is a small regular file with
// one link, owned by uid. O_NOFOLLOW refuses a symlink, O_NONBLOCK keeps a
// FIFO from hanging the open; the checks run on the opened descriptor, so
// nothing can be swapped in between.
func readOwnedFile(dir, name string, uid int) ([]byte, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open runtime dir: %v", ErrBadRecord, err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: open: %v", ErrBadRecord, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: stat: %v", ErrBadRecord, err)
	}
	if err := checkRecordFile(st.Mode, st.Uid, st.Nlink, st.Size, uid); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxRecordSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read: %v", ErrBadRecord, err)
	}
	if len(b) > MaxRecordSize { // grew after the stat
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadRecord, MaxRecordSize)
	}
	return b, nil
}

// checkRecordFile is the decision on the opened file's metadata.
func checkRecordFile(mode uint32, owner uint32, nlink uint64, size int64, uid int) error {
	switch {
	case mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: not a regular file", ErrBadRecord)
	case uid <= 0 || owner != uint32(uid):
		return fmt.Errorf("%w: owned by uid %d, want %d", ErrBadRecord, owner, uid)
	case nlink != 1:
		return fmt.Errorf("%w: %d hard links", ErrBadRecord, nlink)
	case size > MaxRecordSize:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrBadRecord, size, MaxRecordSize)
	}
	return nil
}

// validateIdentity checks what names the run: the key is this job's, the
// version was issued to this node, and the slot is the key's, near now
// and a fire time of the spec of the record's version.
func validateIdentity(r runner.Record, want Expect) error {
	key, err := runkey.Parse(r.RunKey)
	if err != nil || key.JobID != want.JobID {
		return fmt.Errorf("%w: run key %q is not one of job %s", ErrBadRecord, r.RunKey, want.JobID)
	}
	spec, ok := specFor(want.Specs, r.Version)
	if r.Version < 1 || !ok {
		return fmt.Errorf("%w: version %d is not one this node's job specs issued", ErrBadRecord, r.Version)
	}
	if err := checkSlot(key, r.Slot, spec.Fires, want.Now); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if _, ok := wire.RecordedTrigger(key.Trigger, wire.Trigger(r.Trigger)); !ok {
		return fmt.Errorf("%w: trigger %q differs from the run key's", ErrBadRecord, r.Trigger)
	}
	return nil
}

// validateDetails checks how the run went, as the record tells it.
func validateDetails(r runner.Record, want Expect) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadDetails, fmt.Sprintf(format, a...))
	}
	switch r.Kind {
	case runner.KindStarted, runner.KindRan, runner.KindOverlap, runner.KindSetupError, runner.KindPlatformError:
	default:
		return bad("unknown kind %q", r.Kind)
	}
	for _, t := range []*time.Time{r.StartedAt, r.FinishedAt} {
		if t != nil && (t.Before(r.Slot.Add(-FutureSkew)) || t.After(want.Now.Add(FutureSkew))) {
			return bad("start or finish %s outside the slot and now", t.Format(time.RFC3339))
		}
	}
	if r.StartedAt != nil && r.FinishedAt != nil && r.FinishedAt.Before(*r.StartedAt) {
		return bad("finished before it started")
	}
	if r.ExitCode != nil && (*r.ExitCode < 0 || *r.ExitCode > wire.MaxExitCode) {
		return bad("exit code %d outside 0..%d", *r.ExitCode, wire.MaxExitCode)
	}
	if r.Signal != "" && !wire.ValidSignal(r.Signal) {
		return bad("unknown signal %q", r.Signal)
	}
	if err := checkSuperseded(r, want); err != nil {
		return bad("%v", err)
	}
	for name, v := range map[string]string{"reason": r.Reason, "warning": r.Warning, "node": r.Node} {
		if len(v) > MaxReason || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return bad("%s is over %d bytes, not UTF-8 or holds NUL", name, MaxReason)
		}
	}
	return nil
}

// checkSuperseded holds a record's SupersededBy (reported cancelled, never
// counted) to what the runner writes: a run of a cancel_previous spec, a
// fire time of its schedule after the run's slot, not in the future. The
// record is the tenant's to rewrite, so this bounds what a rewrite can
// claim: a cancel_previous job's run that really outlived the next slot.
func checkSuperseded(r runner.Record, want Expect) error {
	if r.SupersededBy == nil {
		return nil
	}
	spec, ok := specFor(want.Specs, r.Version)
	switch {
	case r.Kind != runner.KindRan:
		return fmt.Errorf("superseded_by on a %s record", r.Kind)
	case !ok || spec.OverlapPolicy != wire.OverlapCancelPrevious:
		return errors.New("superseded_by on a run of a job without overlap_policy cancel_previous")
	case !r.SupersededBy.After(r.Slot) || r.SupersededBy.After(want.Now.Add(SupersedeSkew)):
		return fmt.Errorf("superseded_by %s not between the slot and now", r.SupersededBy.UTC().Format(time.RFC3339))
	case spec.Fires != nil && !spec.Fires(*r.SupersededBy):
		return fmt.Errorf("superseded_by %s is not a fire time of the schedule", r.SupersededBy.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkSlot accepts a slot within [now-MaxRunAge, now+FutureSkew] that the
// key spells; a scheduled slot (and a retry's) must also be a fire time of
// the schedule. A
// backfill's slot is the past slot its key names, up to
// wire.MaxBackfillAge older (the core checked it against the schedule
// when it took the request; the job may have changed its schedule since).
func checkSlot(key runkey.Key, slot time.Time, fires func(time.Time) bool, now time.Time) error {
	oldest := now.Add(-MaxRunAge)
	if key.Trigger == wire.TriggerBackfill {
		oldest = oldest.Add(-wire.MaxBackfillAge)
	}
	if slot.Before(oldest) || slot.After(now.Add(FutureSkew)) {
		return fmt.Errorf("slot %s too far from now", slot.UTC().Format(time.RFC3339))
	}
	if key.Trigger == wire.TriggerBackfill && !key.Slot.Equal(slot) {
		return fmt.Errorf("slot %s differs from the run key's", slot.UTC().Format(time.RFC3339))
	}
	// A retry is its slot's next attempt, at the version that ran the
	// slot (the core sends none after a change): the slot is a fire time.
	if key.Trigger != wire.TriggerScheduled && key.Trigger != wire.TriggerRetry {
		return nil
	}
	if !key.Slot.Equal(slot) {
		return fmt.Errorf("slot %s differs from the run key's", slot.UTC().Format(time.RFC3339))
	}
	if fires == nil || !fires(slot) {
		return fmt.Errorf("slot %s is not a fire time of the schedule", slot.UTC().Format(time.RFC3339))
	}
	return nil
}

// RuntimeDirOwner returns the uid the record must belong to: the owner of
// the runtime directory systemd created for the unit's user (its parent is
// root's, so the tenant cannot replace it). When $USER names the unit's
// user (systemd sets it from User=), it must agree. Root never qualifies.
func RuntimeDirOwner(dir, userName string) (int, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return 0, fmt.Errorf("%w: runtime dir: %v", ErrBadRecord, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid == 0 {
		return 0, fmt.Errorf("%w: runtime dir is not a directory of the unit's user", ErrBadRecord)
	}
	if userName != "" && userName != "root" { // a full-privilege hook may see root's
		u, err := user.Lookup(userName)
		if err != nil {
			return 0, fmt.Errorf("%w: user %q: %v", ErrBadRecord, userName, err)
		}
		if u.Uid != strconv.FormatUint(uint64(st.Uid), 10) {
			return 0, fmt.Errorf("%w: runtime dir owned by uid %d, not %s", ErrBadRecord, st.Uid, userName)
		}
	}
	return int(st.Uid), nil
}

// RunningRecord is the record in a running service's runtime directory,
// read with the same care as ReadRecord (the tenant owns the file): the
// node agent asks it before it signals a runner for a cancel, so it
// signals only the runner of the run that was named, and to report the
// run as started. Its fields are compared or checked by the core, never
// trusted further.
func RunningRecord(dir string, uid int) (runner.Record, error) {
	b, err := readOwnedFile(dir, runner.RecordFile, uid)
	if err != nil {
		return runner.Record{}, err
	}
	var r runner.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return runner.Record{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	return r, nil
}
