package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
	names, err := m.scope(req)
	if err != nil {
		return obs, err
	}
	t.lap("scope")
	for _, n := range names {
		d, err := m.readUnit(n)
		if err != nil {
			return obs, err
		}
		if len(d.Files) > 0 {
			obs.Disk[n] = d
		}
	}
	t.lap("read")
	if obs.Enabled, err = m.enabledTimers(); err != nil {
		return obs, err
	}
	t.lap("enabled")
	if obs.Loaded, err = m.loadedUnits(ctx); err != nil {
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
	if obs.Temps, err = m.temps(); err != nil {
		return obs, err
	}
	t.lap("temps")
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

// scope lists the unit names a request may touch.
func (m *Manager) scope(req Request) ([]string, error) {
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
		onDisk, err := m.existing()
		if err != nil {
			return nil, err
		}
		for n := range onDisk {
			set[n] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	return out, nil
}

// existing lists the cron unit names that have any of their files: a
// timer, a service or a spec (a crash in the middle of a removal leaves
// some but not all).
func (m *Manager) existing() (map[string]bool, error) {
	out := map[string]bool{}
	for _, g := range []struct{ dir, ext string }{
		{m.layout.UnitDir, extTimer}, {m.layout.UnitDir, extService}, {m.layout.Paths.SpecDir, extSpec},
	} {
		matches, err := filepath.Glob(filepath.Join(g.dir, wire.UnitPrefix+"*"+g.ext))
		if err != nil {
			return nil, fmt.Errorf("list cron units: %w", err)
		}
		for _, p := range matches {
			out[strings.TrimSuffix(filepath.Base(p), g.ext)] = true
		}
	}
	return out, nil
}

// readUnit reads a unit name's timer, service and spec where they exist.
func (m *Manager) readUnit(name string) (OnDisk, error) {
	d := OnDisk{Files: map[string][]byte{}}
	for ext, path := range map[string]string{
		extTimer: m.layout.unitPath(name, extTimer), extService: m.layout.unitPath(name, extService), extSpec: m.layout.specPath(name),
	} {
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue // ENOTDIR: a broken spec dir holds no spec either
		}
		if err != nil {
			return d, fmt.Errorf("read %s: %w", path, err)
		}
		d.Files[ext] = b
		if ext == extSpec {
			if fi, err := os.Stat(path); err == nil {
				d.SpecMod = fi.ModTime()
			}
		}
	}
	return d, nil
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

func (m *Manager) loadedUnits(ctx context.Context) (map[string]LoadedUnit, error) {
	us, err := m.sys.ListUnits(ctx, nil, []string{wire.UnitPrefix + "*"})
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

// temps lists atomic-write leftovers of hostcron's own files (cron units,
// specs, the marker); other tools' files in the unit dir are not ours.
func (m *Manager) temps() ([]TempFile, error) {
	var out []TempFile
	for _, pattern := range []string{
		filepath.Join(m.layout.UnitDir, atomicfile.TempPrefix+wire.UnitPrefix+"*"),
		filepath.Join(m.layout.Paths.SpecDir, atomicfile.TempPrefix+wire.UnitPrefix+"*"),
		filepath.Join(m.layout.Paths.SpecDir, atomicfile.TempPrefix+dirtyMarker+"-*"),
		filepath.Join(m.layout.Paths.SpecDir, atomicfile.TempPrefix+tombstoneFile+"-*"),
	} {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("list temp files: %w", err)
		}
		for _, p := range matches {
			if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
				out = append(out, TempFile{Path: p, ModTime: fi.ModTime()})
			}
		}
	}
	return out, nil
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
