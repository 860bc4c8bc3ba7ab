package unitmgr

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/wire"
)

// The converge fast path (issue 16: a converge with nothing changed at
// 10,000 timers read the whole set, 30,000 files and systemd's 20,000
// units, and rendered every job). A core reconcile whose plan is empty
// leaves a stamp: the digest of the set it was planned for and a
// fingerprint of everything else the plan was made from, taken before the
// observation. A later converge asks the core for its set's digest first
// (ReconcileUnchanged); if it is the stamp's and the fingerprint is the
// same, the plan would be the same empty one and the converge is done
// without reading the set. docs/semantics.md, "Converge fast path",
// argues what the fingerprint covers and what it does not.

// FastPathMaxAge bounds how long a stamp stands: at least this often a
// converge runs in full whatever the fingerprint says (a backstop for
// what it does not cover: a lock directory's contents, accounts changed
// other than by a write to their files).
const FastPathMaxAge = time.Hour

// stampFormat changes whenever what a stamp means does: a stamp of
// another format never matches.
const stampFormat = 2

// stampFile names the stamp in the spec dir (root-only). It starts with
// none of the prefixes the fingerprint or the listing read there.
const stampFile = ".converge-stamp.json"

// StampPath is where the converge stamp is kept.
func (l Layout) StampPath() string { return filepath.Join(l.Paths.SpecDir, stampFile) }

// stamp records a core reconcile that planned nothing.
type stamp struct {
	Format    int    `json:"format"`
	SetDigest string `json:"set_digest"` // wire.SetDigest of the set
	Jobs      int    `json:"jobs"`
	// State is the node's fingerprint taken before the observation the
	// empty plan was made from: any change after it changes the state.
	State string `json:"state"`
	// LockDirs are the set's lock directories with their owners: the
	// plan checked each, and the fast path checks each again (they live
	// on shared storage, which the fingerprint does not read).
	LockDirs []lockDirOwner `json:"lock_dirs"`
	// Disabled are the units of the set's disabled jobs: the plan ends a
	// catch-up such a job's service runs, so the fast path looks for one.
	Disabled []string  `json:"disabled"`
	Taken    time.Time `json:"taken"`
}

type lockDirOwner struct {
	Dir   string `json:"dir"`
	User  string `json:"user"`
	Group string `json:"group"`
}

// fastPath is the manager's stamp and what its fingerprint covers
// besides the unit and spec directories.
type fastPath struct {
	current *stamp
	loaded  bool // the stamp file was read (or written) by this process
	// key names what the agent was started with (its configuration):
	// another key never matches (SetFastPathKey).
	key string
	// inputs are files the converge depends on outside the units: the
	// account databases admission reads (nil: /etc/passwd, /etc/group).
	inputs []string
	// accountsInFiles: the accounts are read from inputs alone (set by
	// New from the build, accountsFromFiles; tests set it); false turns
	// the fast path off.
	accountsInFiles bool
}

// SetFastPathKey makes key part of every stamp's fingerprint: the agent
// passes its configuration, so a restart with another one (another
// admission policy, another node setting) converges in full. Call it
// before the manager is shared.
func (m *Manager) SetFastPathKey(key string) { m.fast.key = key }

// defaultInputs are the account databases admission and the lock
// directories' owners are read from (os/user without cgo).
var defaultInputs = []string{"/etc/passwd", "/etc/group"}

// ReconcileUnchanged reports whether a converge to the set whose digest
// the core answers has nothing to do: the node's last core reconcile
// planned nothing for a set of that digest, less than FastPathMaxAge ago,
// and nothing it was planned from has changed. digest is called only if
// the node has a stamp, while its fingerprint is taken. false comes with
// why, for the log; the caller then converges in full. An error is the
// digest's (wrapped: the caller tells revisions ahead from the rest) or
// the fingerprint's (a directory that cannot be read).
func (m *Manager) ReconcileUnchanged(ctx context.Context, digest func(context.Context) (wire.DesiredDigest, error)) (bool, string, error) {
	release, err := m.acquire(ctx)
	if err != nil {
		return false, "", err
	}
	defer release()
	start := time.Now()
	fast, why, err := m.unchanged(ctx, digest)
	if fast && m.obs != nil {
		// A converge all the same: the node's last-converge time (which
		// alerts watch) moves as after a full one that did nothing.
		m.obs.Applied(string(OpReconcile), false, time.Since(start), map[string]int{}, nil, m.now())
	}
	return fast, why, err
}

func (m *Manager) unchanged(ctx context.Context, digest func(context.Context) (wire.DesiredDigest, error)) (bool, string, error) {
	st := m.stamp()
	switch age := m.now().Sub(st.taken()); {
	case !m.fast.accountsInFiles:
		return false, "this agent reads accounts through NSS (a cgo build), which no file shows changed", nil
	case st == nil:
		return false, "no stamp: the last converge planned changes, or none ran", nil
	case age < 0 || age > FastPathMaxAge:
		return false, fmt.Sprintf("the stamp is %s old (at most %s)", age.Round(time.Second), FastPathMaxAge), nil
	}
	// The core's answer and the node's fingerprint take about as long
	// (issue 16: 65 and 150-270 ms at 10,000 jobs); one after the other
	// they were most of a fast converge.
	type answer struct {
		d   wire.DesiredDigest
		err error
	}
	got := make(chan answer, 1)
	go func() {
		d, err := digest(ctx)
		got <- answer{d, err}
	}()
	state, err := m.fingerprint(ctx)
	a := <-got
	switch {
	case a.err != nil:
		return false, "", fmt.Errorf("desired set digest: %w", a.err)
	case st.SetDigest != a.d.Digest || st.Jobs != a.d.Jobs:
		return false, "the desired set changed", nil
	case err != nil:
		return false, "", err
	}
	if state != st.State {
		return false, "the node's units, specs, enablement, timers or accounts changed", nil
	}
	if busy, err := m.disabledBusy(ctx, st.Disabled); err != nil || busy != "" {
		// A disabled job's service runs (a run-now, a catch-up): the
		// full plan decides whether to end it. (A disabled job's timer
		// started by hand is in the fingerprint.)
		return false, "a disabled job's service is active: " + busy, err
	}
	for _, l := range st.LockDirs {
		if !m.lockDirOK(l.Dir, l.User, l.Group) {
			return false, "lock directory " + l.Dir + " is missing or not the tenant's", nil
		}
	}
	return true, "", nil
}

// disabledBusy names the service of a disabled job that systemd holds
// running (or starting, stopping), or "" if none is. It lists the cron
// services that run, which are few whatever the node holds.
func (m *Manager) disabledBusy(ctx context.Context, disabled []string) (string, error) {
	if len(disabled) == 0 {
		return "", nil
	}
	us, err := m.sys.ListUnits(ctx, busyStates, []string{wire.UnitPrefix + "*" + extService})
	if err != nil {
		return "", fmt.Errorf("list running cron services: %w", err)
	}
	for _, u := range us {
		if _, found := slices.BinarySearch(disabled, strings.TrimSuffix(u.Name, extService)); found {
			return u.Name, nil
		}
	}
	return "", nil
}

func (s *stamp) taken() time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.Taken
}

// stamp returns the current stamp, reading the file once per process (a
// restarted agent keeps its predecessor's: the fingerprint names the
// binary, so an upgrade does not). An unreadable or foreign file is no
// stamp.
func (m *Manager) stamp() *stamp {
	if m.fast.loaded {
		return m.fast.current
	}
	m.fast.loaded = true
	b, err := os.ReadFile(m.layout.StampPath())
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("converge stamp unreadable; the next converge runs in full", "path", m.layout.StampPath(), "err", err)
		}
		return nil
	}
	var st stamp
	if err := json.Unmarshal(b, &st); err != nil || st.Format != stampFormat {
		m.log.Warn("converge stamp of another format or corrupt; the next converge runs in full", "path", m.layout.StampPath(), "err", err)
		return nil
	}
	m.fast.current = &st
	return m.fast.current
}

// dropStamp forgets the stamp before a plan with steps runs: a stamp
// stands only until the node's next change (the fingerprint would tell
// anyway; this makes it plain).
func (m *Manager) dropStamp() {
	if m.fast.loaded && m.fast.current == nil {
		return
	}
	m.fast.current, m.fast.loaded = nil, true
	if err := os.Remove(m.layout.StampPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("converge stamp not removed; its fingerprint still refuses it", "path", m.layout.StampPath(), "err", err)
	}
}

// stateBefore is the fingerprint a core reconcile takes before it
// observes, for the stamp its plan may leave ("" for any other request,
// or when the fingerprint could not be taken: no stamp then).
func (m *Manager) stateBefore(ctx context.Context, req Request) string {
	if req.Op != OpReconcile || req.Operator {
		return ""
	}
	state, err := m.fileState()
	if err != nil {
		m.log.Warn("converge fingerprint not taken; no fast path after this converge", "err", err)
		return ""
	}
	return state
}

// settleStamp keeps the stamp after a plan: a core reconcile that
// planned and did nothing, with nothing kept, failed, refused, left over
// or remembered about its jobs, leaves one (stampable); any plan with
// steps, and any error, drops it.
func (m *Manager) settleStamp(req Request, before string, p Plan, obs Observed, err error) {
	if len(p.Steps) > 0 || err != nil {
		m.dropStamp()
		return
	}
	if before == "" || !stampable(req, p, obs) {
		return
	}
	st := &stamp{Format: stampFormat, SetDigest: wire.SetDigest(req.Jobs), Jobs: len(req.Jobs), State: observedState(before, obs),
		LockDirs: lockDirsOf(req.Jobs), Disabled: disabledUnits(req.Jobs),
		Taken: m.now().Round(0)} // wall clock only: a stamp from the future (the clock went back) must show as one
	m.fast.current, m.fast.loaded = st, true
	b, merr := json.Marshal(st)
	if merr == nil {
		merr = atomicfile.Write(m.layout.StampPath(), b, 0o600)
	}
	if merr != nil {
		m.log.Warn("converge stamp not written; the fast path holds until this agent stops", "err", merr)
	}
}

// stampable tells whether an empty plan for req is one the same inputs
// give again later: nothing in it depends on the time or on the
// snapshot. Kept units (judged by the snapshot, or by a legacy spec's
// age), temp files (removed once old), a tombstone naming a job of the
// set (it may expire, or a newer snapshot lift it), a dirty marker or an
// unreadable tombstone file all leave no stamp.
func stampable(req Request, p Plan, obs Observed) bool {
	if req.Op != OpReconcile || req.Operator || len(p.Failed)+len(p.Kept)+len(p.Stale) > 0 ||
		len(obs.Temps) > 0 || obs.Dirty || obs.TombstonesUnreadable {
		return false
	}
	for _, j := range req.Jobs {
		// One that refuses the job made the plan report it stale (and
		// may expire). One that does not never will, whatever the time
		// (the job is the same; a tombstone only expires), and nothing
		// lifts it: Refuses is all a plan asks of it (lifts, and
		// tombstoneSteps, which skips the expired).
		if t, ok := obs.Tombstones[j.UnitName()]; ok && t.Refuses(j, req.Now) {
			return false
		}
	}
	return true
}

// lockDirsOf lists the set's lock directories with their owners, each
// once.
func lockDirsOf(jobs []wire.Job) []lockDirOwner {
	seen := map[lockDirOwner]bool{}
	var out []lockDirOwner
	for _, j := range jobs {
		l := lockDirOwner{Dir: j.LockDir(), User: j.User, Group: j.Group}
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// disabledUnits lists the unit names of the disabled jobs, sorted.
func disabledUnits(jobs []wire.Job) []string {
	var out []string
	for _, j := range jobs {
		if !j.Enabled {
			out = append(out, j.UnitName())
		}
	}
	slices.Sort(out)
	return out
}

// fingerprint is a SHA-256 over what a reconcile's plan reads besides the
// set, as far as it can change without the set changing: every cron
// file's inode, size, mode, mtime and ctime in the unit dir, the spec dir
// (with the dirty marker, the tombstones and temp files) and
// timers.target.wants (lstat: an edit in place changes ctime, a rewrite
// the inode); the same of the account databases and of the running
// binary; the layout and the agent's key; and every cron timer systemd
// holds, with its load and active state.
func (m *Manager) fingerprint(ctx context.Context) (string, error) {
	type result struct {
		files string
		err   error
	}
	stat := make(chan result, 1)
	go func() { // the disk and PID 1 answer side by side
		files, err := m.fileState()
		stat <- result{files, err}
	}()
	timers, lerr := m.sys.ListUnits(ctx, nil, []string{wire.UnitPrefix + "*" + extTimer})
	r := <-stat
	switch {
	case r.err != nil:
		return "", r.err
	case lerr != nil:
		return "", fmt.Errorf("list cron timers: %w", lerr)
	}
	return timerState(r.files, timers), nil
}

// timerState completes the file state with the cron timers systemd holds.
func timerState(files string, timers []LoadedUnit) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", files)
	slices.SortFunc(timers, func(a, b LoadedUnit) int { return strings.Compare(a.Name, b.Name) })
	for _, u := range timers {
		fmt.Fprintf(h, "timer %s %s %s %s\n", u.Name, u.LoadState, u.ActiveState, u.JobType)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// observedState is the stamp's state: files stat'ed before the observe,
// timers as the observe saw them (what the plan was made from).
func observedState(files string, obs Observed) string {
	var timers []LoadedUnit
	for _, u := range obs.Loaded {
		if strings.HasSuffix(u.Name, extTimer) {
			timers = append(timers, u)
		}
	}
	return timerState(files, timers)
}

func (m *Manager) fileState() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "format %d\nkey %q\nlayout %+v\n", stampFormat, m.fast.key, m.layout)
	inputs := m.fast.inputs
	if inputs == nil {
		inputs = defaultInputs
	}
	for _, p := range append([]string{"/proc/self/exe"}, inputs...) {
		writeStat(h, p)
	}
	ours := func(name string) bool {
		return strings.HasPrefix(name, wire.UnitPrefix) || strings.HasPrefix(name, atomicfile.TempPrefix)
	}
	for _, d := range []struct {
		dir       string
		keep      func(string) bool
		namesOnly bool
	}{
		{m.layout.UnitDir, ours, false},
		{m.layout.Paths.SpecDir, func(n string) bool { return ours(n) || n == dirtyMarker || n == tombstoneFile }, false},
		// A plan reads only the names of the enable links
		// (enabledTimers), not where they point: 10,000 lstats less.
		{filepath.Join(m.layout.UnitDir, "timers.target.wants"), ours, true},
	} {
		if err := statDir(h, d.dir, d.keep, d.namesOnly); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// statDir writes the lstat of each name in dir that keep accepts, in name
// order, several at a time (30,000 lstats one by one were most of a fast
// converge).
func statDir(h hash.Hash, dir string, keep func(string) bool, namesOnly bool) error {
	all, err := readDirNames(dir)
	if err != nil {
		return err
	}
	names := slices.DeleteFunc(all, func(n string) bool { return !keep(n) })
	slices.Sort(names)
	if namesOnly {
		fmt.Fprintf(h, "names %s %d\n%s\n", dir, len(names), strings.Join(names, "\n"))
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer d.Close()
	// fstatat on the directory into one flat buffer: no path to resolve
	// and no FileInfo per file (30,000 of them were garbage the agent's
	// soft memory limit made the collector chase).
	recs := make([]byte, len(names)*statLen)
	errs := make([]error, len(names))
	fd := int(d.Fd())
	inParallel(len(names), readers, func(i int) {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, names[i], &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			errs[i] = err
			return
		}
		encodeStat(recs[i*statLen:i*statLen:(i+1)*statLen], &st)
	})
	fmt.Fprintf(h, "dir %s %d\n", dir, len(names))
	for i, n := range names {
		if errs[i] != nil {
			fmt.Fprintf(h, "%s error %v\n", n, errs[i])
			continue
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(recs[i*statLen : (i+1)*statLen])
	}
	return nil
}

// statLen is the length of encodeStat's record.
const statLen = 4 + 8*6

// encodeStat appends to b what identifies one version of a file: its
// mode, size, mtime, device and inode (a rewrite gets a new one), ctime
// (an edit in place gets a new one, which no one can set back), owner.
func encodeStat(b []byte, st *unix.Stat_t) []byte {
	b = binary.BigEndian.AppendUint32(b, st.Mode)
	b = binary.BigEndian.AppendUint64(b, uint64(st.Size))
	b = binary.BigEndian.AppendUint64(b, uint64(st.Mtim.Sec)*1e9+uint64(st.Mtim.Nsec))
	b = binary.BigEndian.AppendUint64(b, st.Dev)
	b = binary.BigEndian.AppendUint64(b, st.Ino)
	b = binary.BigEndian.AppendUint64(b, uint64(st.Ctim.Sec)*1e9+uint64(st.Ctim.Nsec))
	return binary.BigEndian.AppendUint64(b, uint64(st.Uid)<<32|uint64(st.Gid))
}

// writeStat writes the stat of an input file (following links: the
// binary behind /proc/self/exe), or its error.
func writeStat(h hash.Hash, path string) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		fmt.Fprintf(h, "%s error %v\n", path, err)
		return
	}
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(encodeStat(make([]byte, 0, statLen), &st))
}
