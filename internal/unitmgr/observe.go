package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/wire"
)

// observe reads what a plan for req needs: the files of the units in
// scope (every cron unit for a reconcile, the named ones otherwise), the
// enabled set, systemd's view of the cron units, the dirty marker, temp
// file leftovers and the jobs' lock directories.
func (m *Manager) observe(ctx context.Context, req Request) (Observed, error) {
	obs := Observed{Disk: map[string]OnDisk{}, NeedReload: map[string]bool{}, LockDirOK: map[string]bool{}}
	t := newPhaseTimer()
	defer func() { m.logPhases(req, "observed", t, "units", len(obs.Disk)) }()
	ls, err := m.list()
	if err != nil {
		return obs, err
	}
	obs.Temps = ls.temps
	names := scope(req, ls)
	t.lap("list")
	if obs.Disk, err = m.readUnits(names, ls); err != nil {
		return obs, err
	}
	t.lap("read")
	if obs.Enabled, err = m.enabledTimers(); err != nil {
		return obs, err
	}
	t.lap("enabled")
	// An apply or a removal asks only for its own units (listPatterns); a
	// reconcile needs every cron unit systemd holds (orphans).
	patterns := listPatterns(nil)
	if req.Op != OpReconcile {
		patterns = listPatterns(names)
	}
	if obs.Loaded, err = m.loadedUnits(ctx, patterns); err != nil {
		return obs, err
	}
	t.lap("list_units")
	if req.Op != OpReconcile {
		m.probeNeedReload(ctx, names, &obs)
		t.lap("need_reload")
	}
	if _, err := os.Stat(m.layout.Marker()); err == nil {
		obs.Dirty = true
	}
	obs.Tombstones, obs.TombstonesUnreadable = m.tombstones()
	for _, j := range req.Jobs {
		if _, seen := obs.LockDirOK[j.LockDir()]; !seen { // one per tenant: see executor.lockDirs
			obs.LockDirOK[j.LockDir()] = m.lockDirOK(j.LockDir(), j.User, j.Group)
		}
	}
	t.lap("lock_dirs")
	return obs, nil
}

// tombstones reads the tombstone file. A missing file is none; an
// unreadable one is logged and counts as none (unreadable true): losing
// tombstones only reopens the window in which a stale message can
// reinstall a removed job (the next converge removes it again), while
// failing here would stop every change to the node. The next plan that
// records a removal sets the file aside before writing a new one, so
// what it held is never overwritten.
func (m *Manager) tombstones() (ts map[string]Tombstone, unreadable bool) {
	b, err := os.ReadFile(m.layout.TombstonePath())
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return map[string]Tombstone{}, false
	}
	if err == nil {
		ts, err = decodeTombstones(b)
	}
	if err != nil {
		m.log.Error("tombstones unreadable; treated as none, set aside at the next removal", "path", m.layout.TombstonePath(), "err", err)
		return map[string]Tombstone{}, true
	}
	return ts, false
}

// scope lists the unit names a request may touch: its jobs and names,
// and for a reconcile every cron unit that has a file.
func scope(req Request, ls listing) []string {
	set := map[string]bool{}
	for _, j := range req.Jobs {
		set[j.UnitName()] = true
	}
	for _, n := range req.Names {
		if validUnitName(n) {
			set[n] = true
		}
	}
	if req.Op == OpReconcile {
		for n := range ls.files {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	return out
}

// listing is one read of the unit and the spec directory: which of each
// cron unit's files exist (a timer, a service or a spec: a crash in the
// middle of a removal leaves some but not all), and the atomic-write
// leftovers of hostcron's own files (cron units, specs, the marker, the
// tombstones; other tools' files in the unit dir are not ours). One pass
// over each directory (issue 16: three globs and four temp-file globs
// read the 20,000-entry unit dir three times and the spec dir four), and
// no open of a file that is not there.
type listing struct {
	files map[string]map[string]bool // unit name → extensions present
	temps []TempFile
}

func (m *Manager) list() (listing, error) {
	ls := listing{files: map[string]map[string]bool{}}
	for _, d := range []struct {
		dir   string
		exts  []string
		temps []string // name prefixes of our temp files
	}{
		{m.layout.UnitDir, []string{extTimer, extService}, []string{atomicfile.TempPrefix + wire.UnitPrefix}},
		{m.layout.Paths.SpecDir, []string{extSpec}, []string{atomicfile.TempPrefix + wire.UnitPrefix,
			atomicfile.TempPrefix + dirtyMarker + "-", atomicfile.TempPrefix + tombstoneFile + "-"}},
	} {
		names, err := readDirNames(d.dir)
		if err != nil {
			return ls, err
		}
		for _, n := range names {
			ls.add(d.dir, n, d.exts, d.temps)
		}
	}
	return ls, nil
}

// add files name (in dir) as a unit's file or as a leftover temp file.
func (ls *listing) add(dir, name string, exts, temps []string) {
	for _, p := range temps {
		if strings.HasPrefix(name, p) {
			path := filepath.Join(dir, name)
			if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
				ls.temps = append(ls.temps, TempFile{Path: path, ModTime: fi.ModTime()})
			}
			return
		}
	}
	if !strings.HasPrefix(name, wire.UnitPrefix) {
		return
	}
	for _, ext := range exts {
		if unit, ok := strings.CutSuffix(name, ext); ok {
			if ls.files[unit] == nil {
				ls.files[unit] = map[string]bool{}
			}
			ls.files[unit][ext] = true
		}
	}
}

// readDirNames lists dir; a missing directory (or a file where it should
// be) holds nothing.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return names, nil
}

// existing lists the cron unit names that have any of their files.
func (m *Manager) existing() (map[string]bool, error) {
	ls, err := m.list()
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ls.files))
	for n := range ls.files {
		out[n] = true
	}
	return out, nil
}

// readers is how many files observe reads at once: reading 30,000 small
// files from the page cache is system-call bound, so a few readers use
// the cores the node has.
const readers = 8

// readUnits reads the files of names that the listing found, several at
// a time; a name without any file is left out.
func (m *Manager) readUnits(names []string, ls listing) (map[string]OnDisk, error) {
	got := make([]OnDisk, len(names))
	errs := make([]error, len(names))
	inParallel(len(names), readers, func(i int) { got[i], errs[i] = m.readUnit(names[i], ls.files[names[i]]) })
	n := 0
	for i := range names {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if got[i].Files.any() {
			n++
		}
	}
	// Sized for the units found, not the names asked: a new node's first
	// converge asks for 10,000 and finds none.
	out := make(map[string]OnDisk, n)
	for i, name := range names {
		if got[i].Files.any() {
			out[name] = got[i]
		}
	}
	return out, nil
}

// readUnit reads those of a unit name's timer, service and spec that the
// listing found (one removed since is skipped), keeping of each its sum
// and of the spec what it says it was written from, not the bytes
// (OnDisk).
func (m *Manager) readUnit(name string, present map[string]bool) (OnDisk, error) {
	var d OnDisk
	buf := readBufs.Get().(*[]byte)
	defer readBufs.Put(buf)
	for ext := range present {
		path := m.layout.specPath(name)
		if ext != extSpec {
			path = m.layout.unitPath(name, ext)
		}
		b, mod, err := readFile(path, (*buf)[:0])
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue // ENOTDIR: a broken spec dir holds no spec either
		}
		if err != nil {
			return d, fmt.Errorf("read %s: %w", path, err)
		}
		*buf = b[:0] // grown for a larger file: keep the larger buffer
		d.diskFile(ext, b)
		if ext == extSpec {
			d.SpecMod = mod
		}
	}
	return d, nil
}

// readBufs are observe's read buffers: a file's bytes are needed only
// until they are summed, so each reader reuses one buffer rather than
// leaving 30,000 files' worth of garbage for the collector.
var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// readFile reads a file into buf (grown as needed) and returns its
// content and modification time, through one open.
func readFile(path string, buf []byte) ([]byte, time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, err
	}
	b := buf[:0]
	if need := int(fi.Size()) + 1; cap(b) < need {
		b = make([]byte, 0, need)
	}
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, fi.ModTime(), nil
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grew since the stat
		}
	}
}

// enabledTimers returns the cron units whose timer is enabled: the ones
// with a symlink in timers.target.wants, which is what enabling a unit with
// WantedBy=timers.target creates. Reading the directory is one pass;
// systemd's ListUnitFilesByPatterns searches every .wants directory for
// every unit file, which took over a minute at 10,000 timers.
func (m *Manager) enabledTimers() (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(m.layout.UnitDir, "timers.target.wants"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("list enabled timers: %w", err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), extTimer); ok && strings.HasPrefix(name, wire.UnitPrefix) {
			out[name] = true
		}
	}
	return out, nil
}

func (m *Manager) loadedUnits(ctx context.Context, patterns []string) (map[string]LoadedUnit, error) {
	us, err := m.sys.ListUnits(ctx, nil, patterns)
	if err != nil {
		return nil, fmt.Errorf("list cron units: %w", err)
	}
	out := make(map[string]LoadedUnit, len(us))
	for _, u := range us {
		out[u.Name] = u
	}
	return out, nil
}

// probeNeedReload asks systemd, for each loaded unit in scope, whether its
// file changed since systemd read it: a crash of an apply whose dirty
// marker could not be written, or an edit by hand that happens to match
// what we want. It cannot see a unit systemd never loaded, which is why
// apply writes the marker, and it costs two D-Bus round trips per unit
// file, which is why only Apply and Remove (a few named units) probe: at
// 10,000 timers it would double a no-op reconcile, which relies on the
// marker and on rewriting every file that differs. A failed probe is
// logged and counts as "no".
func (m *Manager) probeNeedReload(ctx context.Context, names []string, obs *Observed) {
	for _, n := range names {
		for _, f := range []string{n + extTimer, n + extService} {
			if obs.Loaded[f].LoadState != "loaded" {
				continue
			}
			v, err := m.sys.UnitProperty(ctx, f, "", "NeedDaemonReload")
			if err != nil {
				m.log.Warn("read NeedDaemonReload", "unit", f, "err", err)
				continue
			}
			if yes, _ := v.(bool); yes {
				obs.NeedReload[f] = true
			}
		}
	}
}

// lockDirOK reports whether dir is a real directory (not a link) of the
// tenant's user and group with mode 0700; anything else gets a lockdir
// step, which creates or fixes it.
func lockDirOK(dir, user, group string) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	uid, gid, err := lookupIDs(user, group)
	return err == nil && int(st.Uid) == uid && int(st.Gid) == gid
}
