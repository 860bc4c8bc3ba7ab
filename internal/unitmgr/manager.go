// Package unitmgr keeps a node's cron units in a desired state through
// systemd's D-Bus API: it writes unit and spec files, reloads systemd once
// per batch when something changed, enables and starts timers, and removes
// units nobody wants. It knows nothing of Temporal.
package unitmgr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// Manager manages cron-* units in UnitDir.
type Manager struct {
	conn    *sd.Conn
	unitDir string
	paths   units.Paths
	log     *slog.Logger
}

// New returns a manager on a systemd D-Bus connection.
func New(conn *sd.Conn, unitDir string, paths units.Paths, log *slog.Logger) *Manager {
	return &Manager{conn: conn, unitDir: unitDir, paths: paths, log: log}
}

// Reconcile makes the node's cron units exactly jobs: it adds and rewrites
// what differs, removes orphaned cron-* units and stops timers of disabled
// jobs, with at most one daemon-reload.
//
// An orphan younger than minOrphanAge is left alone: the desired set is a
// snapshot, and a job created after it may already have been written by
// its own workflow. The next reconcile removes it if it is still unwanted.
func (m *Manager) Reconcile(ctx context.Context, jobs []wire.Job, minOrphanAge time.Duration) (wire.NodeReport, error) {
	existing, err := m.existing()
	if err != nil {
		return wire.NodeReport{}, err
	}
	want := map[string]bool{}
	for _, j := range jobs {
		want[j.UnitName()] = true
	}
	var orphans []string
	for name := range existing {
		if want[name] {
			continue
		}
		if fi, err := os.Stat(filepath.Join(m.unitDir, name+".timer")); err == nil && time.Since(fi.ModTime()) < minOrphanAge {
			continue
		}
		orphans = append(orphans, name)
	}
	sort.Strings(orphans)
	return m.sync(ctx, jobs, orphans)
}

// Apply adds or updates the given jobs and leaves every other unit alone.
func (m *Manager) Apply(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	return m.sync(ctx, jobs, nil)
}

// Remove stops and removes the units of the named jobs (cron-{tenant}-{id}).
func (m *Manager) Remove(ctx context.Context, names []string) (wire.NodeReport, error) {
	return m.sync(ctx, nil, names)
}

// existing lists the cron units that have a timer file in the unit dir.
func (m *Manager) existing() (map[string]bool, error) {
	matches, err := filepath.Glob(filepath.Join(m.unitDir, wire.UnitPrefix+"*.timer"))
	if err != nil {
		return nil, fmt.Errorf("list cron units: %w", err)
	}
	out := map[string]bool{}
	for _, p := range matches {
		out[strings.TrimSuffix(filepath.Base(p), ".timer")] = true
	}
	return out, nil
}

// sync is the one path every operation takes: write, remove, (dis)enable,
// reload once, then start and stop timers.
func (m *Manager) sync(ctx context.Context, jobs []wire.Job, remove []string) (wire.NodeReport, error) {
	var rep wire.NodeReport
	changedTimers := map[string]bool{}
	var applied []wire.Job
	for _, j := range jobs {
		timerChanged, err := m.writeJob(j, &rep)
		if err != nil {
			rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", j.UnitName(), err))
			m.log.Error("apply cron job", "unit", j.UnitName(), "err", err)
			continue
		}
		if timerChanged {
			changedTimers[j.UnitName()] = true
		}
		applied = append(applied, j)
	}
	if err := m.removeUnits(ctx, remove, &rep); err != nil {
		return rep, err
	}
	if err := m.setEnablement(ctx, applied, &rep); err != nil {
		return rep, err
	}
	if len(rep.Written)+len(rep.Removed)+len(rep.Enabled)+len(rep.Disabled) > 0 {
		if err := m.conn.ReloadContext(ctx); err != nil {
			return rep, fmt.Errorf("daemon-reload: %w", err)
		}
		rep.Reloads = 1
	}
	return rep, m.setActivity(ctx, applied, changedTimers)
}

// writeJob writes a job's spec and unit files where they differ and reports
// whether its timer file changed. A job older than what the node has (a
// converge snapshot racing the job's own workflow) is not written back.
func (m *Manager) writeJob(j wire.Job, rep *wire.NodeReport) (bool, error) {
	uj, spec, err := desired.Translate(j)
	if err != nil {
		return false, err
	}
	specPath := filepath.Join(m.paths.SpecDir, uj.Name()+".json")
	if have, err := jobspec.Read(specPath); err == nil && have.Version > j.Version {
		rep.Kept = append(rep.Kept, uj.Name())
		return false, nil
	}
	r, err := units.Render(uj, m.paths)
	if err != nil {
		return false, err
	}
	if err := ensureLockDir(j.LockDir(), j.User, j.Group); err != nil {
		return false, err
	}
	specBytes, err := spec.Marshal()
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(m.paths.SpecDir, 0o700); err != nil {
		return false, fmt.Errorf("create spec dir: %w", err)
	}
	wrote, err := writeIfChanged(specPath, specBytes, 0o600)
	if err != nil {
		return false, err
	}
	if wrote {
		rep.Specs = append(rep.Specs, r.Name)
	}
	timerChanged := false
	for ext, content := range map[string][]byte{".service": r.Service, ".timer": r.Timer} {
		wrote, err := writeIfChanged(filepath.Join(m.unitDir, r.Name+ext), content, 0o644)
		if err != nil {
			return false, err
		}
		if wrote {
			rep.Written = append(rep.Written, r.Name+ext)
			timerChanged = timerChanged || ext == ".timer"
		}
	}
	return timerChanged, nil
}

// removeUnits stops, disables and deletes units. A running service is left
// to finish; systemd keeps it loaded until then.
func (m *Manager) removeUnits(ctx context.Context, names []string, rep *wire.NodeReport) error {
	if len(names) == 0 {
		return nil
	}
	var timers []string
	for _, n := range names {
		if !strings.HasPrefix(n, wire.UnitPrefix) || strings.ContainsAny(n, "/\x00") {
			return fmt.Errorf("remove: %q is not a cron unit name", n)
		}
		if _, err := m.conn.StopUnitContext(ctx, n+".timer", "replace", nil); err != nil {
			m.log.Debug("stop timer", "unit", n, "err", err) // not loaded: nothing to stop
		}
		timers = append(timers, n+".timer")
	}
	if _, err := m.conn.DisableUnitFilesContext(ctx, timers, false); err != nil {
		m.log.Debug("disable removed timers", "err", err)
	}
	for _, n := range names {
		gone := false
		for _, p := range []string{
			filepath.Join(m.unitDir, n+".timer"), filepath.Join(m.unitDir, n+".service"),
			filepath.Join(m.paths.SpecDir, n+".json"),
		} {
			removed, err := removeIfExists(p)
			if err != nil {
				return err
			}
			gone = gone || removed
		}
		if gone {
			rep.Removed = append(rep.Removed, n)
		}
	}
	return nil
}

// setEnablement enables the timers of enabled jobs and disables the others,
// one D-Bus call each, only for timers whose state differs.
func (m *Manager) setEnablement(ctx context.Context, jobs []wire.Job, rep *wire.NodeReport) error {
	if len(jobs) == 0 {
		return nil
	}
	enabledNow, err := m.enabledTimers()
	if err != nil {
		return err
	}
	var enable, disable []string
	for _, j := range jobs {
		timer := j.UnitName() + ".timer"
		switch enabled := enabledNow[j.UnitName()]; {
		case j.Enabled && !enabled:
			enable = append(enable, timer)
		case !j.Enabled && enabled:
			disable = append(disable, timer)
		}
	}
	if len(enable) > 0 {
		if _, _, err := m.conn.EnableUnitFilesContext(ctx, enable, false, true); err != nil {
			return fmt.Errorf("enable timers: %w", err)
		}
		rep.Enabled = enable
	}
	if len(disable) > 0 {
		if _, err := m.conn.DisableUnitFilesContext(ctx, disable, false); err != nil {
			return fmt.Errorf("disable timers: %w", err)
		}
		rep.Disabled = disable
	}
	return nil
}

// enabledTimers returns the cron units whose timer is enabled: the ones
// with a symlink in timers.target.wants, which is what enabling a unit with
// WantedBy=timers.target creates. Reading the directory is one pass;
// systemd's ListUnitFilesByPatterns searches every .wants directory for
// every unit file, which took over a minute at 10,000 timers.
func (m *Manager) enabledTimers() (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(m.unitDir, "timers.target.wants"))
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("list enabled timers: %w", err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".timer"); ok && strings.HasPrefix(name, wire.UnitPrefix) {
			out[name] = true
		}
	}
	return out, nil
}

// setActivity starts the timers of enabled jobs, restarts those whose
// calendar changed (Persistent=no, so a restart never fires the job) and
// stops the timers of disabled jobs.
func (m *Manager) setActivity(ctx context.Context, jobs []wire.Job, changed map[string]bool) error {
	if len(jobs) == 0 {
		return nil
	}
	loaded, err := m.conn.ListUnitsByPatternsContext(ctx, nil, []string{wire.UnitPrefix + "*.timer"})
	if err != nil {
		return fmt.Errorf("list timers: %w", err)
	}
	active := map[string]bool{}
	for _, u := range loaded {
		active[u.Name] = u.ActiveState == "active"
	}
	for _, j := range jobs {
		timer := j.UnitName() + ".timer"
		switch {
		case j.Enabled && active[timer] && changed[j.UnitName()]:
			_, err = m.conn.RestartUnitContext(ctx, timer, "replace", nil)
		case j.Enabled && !active[timer]:
			_, err = m.conn.StartUnitContext(ctx, timer, "replace", nil)
		case !j.Enabled && active[timer]:
			_, err = m.conn.StopUnitContext(ctx, timer, "replace", nil)
		}
		if err != nil {
			return fmt.Errorf("set %s: %w", timer, err)
		}
	}
	return nil
}

// State lists the node's cron units.
func (m *Manager) State(ctx context.Context) ([]wire.UnitState, error) {
	names, err := m.existing()
	if err != nil {
		return nil, err
	}
	enabled, err := m.enabledTimers()
	if err != nil {
		return nil, err
	}
	loaded, err := m.conn.ListUnitsByPatternsContext(ctx, nil, []string{wire.UnitPrefix + "*"})
	if err != nil {
		return nil, fmt.Errorf("list units: %w", err)
	}
	activeState := map[string]string{}
	for _, u := range loaded {
		activeState[u.Name] = u.ActiveState
	}
	var out []wire.UnitState
	for name := range names {
		st := wire.UnitState{Name: name, TimerEnabled: enabled[name], TimerActive: activeState[name+".timer"] == "active",
			ServiceActive: activeState[name+".service"]}
		h := sha256.New()
		for _, ext := range []string{".timer", ".service"} {
			b, err := os.ReadFile(filepath.Join(m.unitDir, name+ext))
			if err != nil {
				return nil, fmt.Errorf("read %s%s: %w", name, ext, err)
			}
			h.Write(b)
		}
		st.Hash = hex.EncodeToString(h.Sum(nil))
		if p, err := m.conn.GetUnitTypePropertyContext(ctx, name+".timer", "Timer", "NextElapseUSecRealtime"); err == nil {
			st.NextElapseUS, _ = p.Value.Value().(uint64)
		}
		if p, err := m.conn.GetUnitTypePropertyContext(ctx, name+".service", "Service", "Result"); err == nil {
			st.LastResult, _ = p.Value.Value().(string)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
