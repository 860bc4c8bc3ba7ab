package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/hostcron/hostcron/internal/wire"
)

// sliceJobs is how many unit names a reconcile observes, plans and
// writes at once. A converge of a whole set held every unit's three files,
// every job's rendering and every write's content at once (issue 16: the
// node agent at 10,000 timers); in slices it holds one slice's, plus what
// the end of the converge needs (the starts, whether to reload). Two of
// the core's pages (wire.DesiredPageSize): a slice's files and renderings
// are a few MB, and each slice has enough units to keep the readers and
// renderers busy. A variable for the tests, which slice small sets.
var sliceJobs = 2 * wire.DesiredPageSize

// idSlices partitions the unit names a reconcile may touch by job id.
// bounds are the upper ids of every slice but the last: slice k holds the
// ids in (bounds[k-1], bounds[k]], the last every id above the last bound
// and every name without a job id. Any partition does for orphans: a unit
// is judged by the snapshot of the page whose id range holds it
// (Request.snapshotFor) whatever slice plans it, and each name is planned
// in exactly one slice.
type idSlices struct {
	bounds []string
}

// sliceIDs makes slices of about n ids each from ids (any order,
// duplicates allowed; "" is no id and is ignored).
func sliceIDs(ids []string, n int) idSlices {
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	sorted = compactNonEmpty(sorted)
	var s idSlices
	for i := n - 1; i < len(sorted)-1; i += n {
		s.bounds = append(s.bounds, sorted[i])
	}
	return s
}

// compactNonEmpty drops "" and repeats from a sorted list.
func compactNonEmpty(sorted []string) []string {
	out := sorted[:0]
	for _, v := range sorted {
		if v != "" && (len(out) == 0 || out[len(out)-1] != v) {
			out = append(out, v)
		}
	}
	return out
}

// count is the number of slices.
func (s idSlices) count() int { return len(s.bounds) + 1 }

// of is the slice that plans unit name.
func (s idSlices) of(name string) int {
	if id := idOf(name); id != "" {
		return sort.SearchStrings(s.bounds, id)
	}
	return len(s.bounds)
}

// idOf is the job id in a unit name, "" if it has none.
func idOf(name string) string {
	if _, id, ok := wire.SplitUnitName(name); ok && wire.ValidID(id) {
		return id
	}
	return ""
}

// nodeView is what a sliced reconcile observes once for the whole node:
// the directory listing and systemd's units split by slice, and the rest
// (enabled links, dirty marker, tombstones, leftovers) as observe reads
// it. The unit files are read slice by slice (observeSlice).
type nodeView struct {
	slices idSlices
	files  []map[string]map[string]bool // per slice: unit name → extensions present
	loaded []map[string]LoadedUnit      // per slice: by unit file name
	node   Observed                     // without Disk, Loaded and LockDirOK
	lockOK map[string]bool              // lock dirs checked in earlier slices
}

// observeNode reads what every slice of req shares.
func (m *Manager) observeNode(ctx context.Context, req Request) (nodeView, error) {
	t := newPhaseTimer()
	var v nodeView
	defer func() { m.logPhases(req, "observed node", t, "slices", v.slices.count()) }()
	ls, err := m.list()
	if err != nil {
		return v, err
	}
	t.lap("list")
	loaded, err := m.loadedUnits(ctx)
	if err != nil {
		return v, err
	}
	t.lap("list_units")
	ids := make([]string, 0, len(req.Jobs)+len(ls.files))
	for _, j := range req.Jobs {
		ids = append(ids, idOf(j.UnitName()))
	}
	for n := range ls.files {
		ids = append(ids, idOf(n))
	}
	v.slices = sliceIDs(ids, sliceJobs)
	v.files = make([]map[string]map[string]bool, v.slices.count())
	v.loaded = make([]map[string]LoadedUnit, v.slices.count())
	for k := range v.files {
		v.files[k], v.loaded[k] = map[string]map[string]bool{}, map[string]LoadedUnit{}
	}
	for n, exts := range ls.files {
		v.files[v.slices.of(n)][n] = exts
	}
	for f, u := range loaded {
		v.loaded[v.slices.of(unitOfFile(f))][f] = u
	}
	v.node = Observed{NeedReload: map[string]bool{}, Temps: ls.temps}
	if v.node.Enabled, err = m.enabledTimers(); err != nil {
		return v, err
	}
	_, err = os.Stat(m.layout.Marker())
	v.node.Dirty = err == nil
	v.node.Tombstones, v.node.TombstonesUnreadable = m.tombstones()
	v.lockOK = map[string]bool{}
	t.lap("enabled_tombstones")
	return v, nil
}

// observeSlice is the Observed of slice k of a sliced reconcile: its
// units' files, read now, and the node's view (only the first slice
// cleans up leftovers).
func (m *Manager) observeSlice(v nodeView, k int, jobs []wire.Job) (Observed, error) {
	obs := v.node
	obs.Loaded = v.loaded[k]
	if k > 0 {
		obs.Temps = nil
	}
	names := make([]string, 0, len(v.files[k]))
	for n := range v.files[k] {
		names = append(names, n)
	}
	var err error
	if obs.Disk, err = m.readUnits(names, listing{files: v.files[k]}); err != nil {
		return obs, err
	}
	obs.LockDirOK = map[string]bool{}
	for _, j := range jobs {
		d := j.LockDir()
		if _, seen := obs.LockDirOK[d]; seen {
			continue
		}
		ok, seen := v.lockOK[d]
		if !seen {
			ok = m.lockDirOK(d, j.User, j.Group)
			v.lockOK[d] = ok
		}
		obs.LockDirOK[d] = ok
	}
	return obs, nil
}

// jobsBySlice splits jobs by the slice that plans their units.
func jobsBySlice(s idSlices, jobs []wire.Job) [][]wire.Job {
	out := make([][]wire.Job, s.count())
	for _, j := range jobs {
		k := s.of(j.UnitName())
		out[k] = append(out[k], j)
	}
	return out
}

// deferEnd splits a slice's plan into what runs now and what waits for
// the end of the converge (pure): the daemon-reload, which one converge
// runs once after every slice's writes and removals, and the starts and
// restarts, which must follow it.
func deferEnd(p Plan) (now Plan, reload *Step, starts []Step) {
	now = Plan{Failed: p.Failed, Kept: p.Kept, Stale: p.Stale}
	for i := range p.Steps {
		switch s := p.Steps[i]; s.Kind {
		case KindReload:
			reload = &s
		case KindStart, KindRestart:
			starts = append(starts, s)
		default:
			now.Steps = append(now.Steps, s)
		}
	}
	return now, reload, starts
}

// endPlan is the last plan of a sliced converge (pure): one
// daemon-reload if any slice needed one, with every slice's reasons
// (each said once), then every slice's starts and restarts but those of
// units whose earlier step failed.
func endPlan(reloads []Step, starts []Step, failed map[string]bool) Plan {
	var p Plan
	if len(reloads) > 0 {
		var why []string
		seen := map[string]bool{}
		for _, r := range reloads {
			for _, w := range strings.Split(r.Reason, "; ") {
				if !seen[w] {
					seen[w] = true
					why = append(why, w)
				}
			}
		}
		p.Steps = append(p.Steps, Step{Kind: KindReload, Reason: strings.Join(why, "; ")})
	}
	for _, s := range starts {
		if !failed[s.Unit] {
			p.Steps = append(p.Steps, s)
		}
	}
	return p
}

// reconcileInSlices plans and applies a reconcile slice by slice of job
// ids (idSlices): each slice's files are read, its jobs rendered, its
// stops, disables, writes, removals and enables applied, and all of it
// let go before the next; the reload and the starts wait for the end
// (deferEnd, endPlan), so a converge still reloads at most once and
// starts no timer before the reload that loads its files. Crash safety
// is the whole plan's: the dirty marker is written before the first unit
// file changes in any slice and removed only after the reload
// (executor.reloadLater), and a tombstone is written before its slice's
// removals; a converge that dies between slices leaves written files with
// the marker, unstarted timers and done removals, which the next converge
// reloads, starts and finds done. A node-wide failure in a slice ends the
// converge there, as it ends a plan: its callers are retried.
func (m *Manager) reconcileInSlices(ctx context.Context, req Request, e *executor) (wire.NodeReport, error) {
	if req.Now.IsZero() {
		req.Now = m.now()
	}
	v, err := m.observeNode(ctx, req)
	if err != nil {
		return wire.NodeReport{}, err
	}
	bySlice := jobsBySlice(v.slices, req.Jobs)
	var (
		rep      wire.NodeReport
		unitErrs []error
		reloads  []Step
		starts   []Step
		failed   = map[string]bool{}
	)
	e.reloadLater = true
	for k := range bySlice {
		part := req
		part.Jobs = bySlice[k]
		bySlice[k] = nil // let the slice's jobs go with it
		r, reload, st, err := m.runSlice(ctx, v, k, part, e)
		rep = mergeReports(rep, r)
		for _, f := range r.Failed {
			failed[unitOfFailure(f)] = true
		}
		if reload != nil {
			reloads = append(reloads, *reload)
		}
		starts = append(starts, st...)
		own, whole := splitErrors(err)
		for _, ue := range own {
			unitErrs = append(unitErrs, ue)
		}
		if len(whole) > 0 {
			return rep, errors.Join(append(unitErrs, whole...)...)
		}
		if e.tombstoned { // the next slice plans from the file as this one left it
			v.node.Tombstones, v.node.TombstonesUnreadable = m.tombstones()
		}
	}
	e.reloadLater = false
	r, err := e.run(ctx, endPlan(reloads, starts, failed))
	rep = mergeReports(rep, r)
	rep.Reloads = r.Reloads
	own, whole := splitErrors(err)
	for _, ue := range own {
		unitErrs = append(unitErrs, ue)
	}
	return rep, errors.Join(append(unitErrs, whole...)...)
}

// runSlice observes, plans and applies slice k of a sliced reconcile, but
// its reload and starts, which it returns.
func (m *Manager) runSlice(ctx context.Context, v nodeView, k int, req Request, e *executor) (wire.NodeReport, *Step, []Step, error) {
	obs, err := m.observeSlice(v, k, req.Jobs)
	if err != nil {
		return wire.NodeReport{}, nil, nil, fmt.Errorf("observe slice %d of %d: %w", k+1, v.slices.count(), err)
	}
	p, err := MakePlan(m.layout, req, obs)
	if err != nil {
		return wire.NodeReport{}, nil, nil, err
	}
	now, reload, starts := deferEnd(p)
	for _, s := range now.Steps {
		m.log.Debug("unit step", "op", req.Op, "slice", k+1, "kind", s.Kind, "unit", s.Unit, "target", s.Target, "reason", s.Reason)
	}
	e.tombstoned = false
	rep, err := e.run(ctx, now)
	return rep, reload, starts, err
}
