// Package unitmgr keeps a node's cron units in a desired state through
// systemd: it observes the unit files, specs and systemd's view, makes a
// plan (MakePlan, pure) of ordered steps with reasons, and applies it
// through the Systemd interface. One plan+apply runs at a time; changes
// that wait for it are merged into one plan (the apply queue, queue.go).
// It knows nothing of Temporal.
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

	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// Manager manages cron-* units in a unit directory.
type Manager struct {
	// lock makes observe+plan+apply one step: the state a plan was made
	// from must not change under it by another activity on the same node.
	// A channel, not a mutex, so that a caller whose context ends while it
	// waits gives up (see acquire).
	lock   chan struct{}
	sys    Systemd
	layout Layout
	log    *slog.Logger
	now    func() time.Time
	// lockDir creates a job's lock directory (ensureLockDir; tests, which
	// have no tenant users, replace it).
	lockDir   func(dir, user, group string) error
	lockDirOK func(dir, user, group string) bool
	runNow    runNowHooks // zero: the node's (see runNowHooks)
	waits     runNowWaits // the run-nows waiting long for a run to end (runnowwaits.go)
	cancel    cancelPaths // zero: the node's (see cancelPaths)
	obs       Observer    // nil: nothing observes
	q         applyQueue  // Apply, Delete, Reconcile and Remove wait here (queue.go)
	fast      fastPath    // the converge stamp (fastpath.go); read and written under lock
	// lockPatience is how long the node's unit lock may stay held by
	// another process before the manager goes without it (nodeLock;
	// SetLockPatience); 0 waits as long as the caller's context allows.
	lockPatience time.Duration
	lockBusy     *lockBusy // with a patience: which holder holds the lock, since when
}

// SetLockPatience sets how long the node's unit lock may stay held by
// another process (an operator's one-shot command) before the manager
// applies without it: the daemon sets it, so that a command stopped
// while it holds the lock cannot hold back the core's changes for good.
// The patience counts from the first wait that found the lock held, not
// per wait: a change's wait still ends with its context, and the core
// retries it. Past it, behind the same holder, the manager claims the
// node and applies without the lock (claimWithout), until the lock
// changes hands. Call it before the manager is shared.
func (m *Manager) SetLockPatience(d time.Duration) { m.lockPatience, m.lockBusy = d, &lockBusy{} }

// Observer is told what each plan+apply did, for the agent's metrics
// (metrics.Node has it): the operation, whether it was an operator's, how
// long it took, the steps executed by kind, and how it ended; and each
// daemon-reload's duration.
type Observer interface {
	Applied(op string, operator bool, took time.Duration, steps map[string]int, err error, at time.Time)
	Reloaded(took time.Duration)
}

// SetObserver makes o observe every later apply. Call it before the
// manager is shared.
func (m *Manager) SetObserver(o Observer) { m.obs = o }

// New returns a manager that talks to systemd through sys.
func New(sys Systemd, unitDir string, paths units.Paths, log *slog.Logger) *Manager {
	return &Manager{lock: make(chan struct{}, 1), sys: sys, layout: Layout{UnitDir: unitDir, Paths: paths}, log: log, now: time.Now, lockDir: ensureLockDir, lockDirOK: lockDirOK,
		fast: fastPath{accountsInFiles: accountsFromFiles}}
}

// SetNode sets what the node adds to every job's units (IPAddressDeny=, see
// desired.Node). Call it before the first Reconcile: a later change renders
// differently, so the next Reconcile rewrites every unit.
func (m *Manager) SetNode(n desired.Node) { m.layout.Node = n }

// Reconcile makes the node's cron units the core's desired set's jobs: it
// adds and rewrites what differs, stops timers of disabled jobs and
// removes orphans, with at most one daemon-reload. An orphan is a unit the
// set lacks whose installed write the set's snapshot saw (for a set read
// in pages, the snapshot of the page whose id range holds the job); one
// it did not see may be a job created after the snapshot, and stays (as
// does a unit whose spec has no revision, until it is older than
// LegacyOrphanAge). Each orphan leaves a tombstone with that snapshot; a
// job the set lists lifts an orphan tombstone recorded by an older
// snapshot (Tombstone.LiftedBy).
func (m *Manager) Reconcile(ctx context.Context, set wire.DesiredSet) (wire.NodeReport, error) {
	return m.do(ctx, Request{Op: OpReconcile, Jobs: set.Jobs, Snapshot: set.Snapshot, Pages: set.Pages})
}

// ReconcileExactly is an operator's reconcile: jobs is complete, every
// other cron unit goes, no tombstone is left, and tombstones never refuse
// its jobs (it lifts theirs).
func (m *Manager) ReconcileExactly(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	return m.do(ctx, Request{Op: OpReconcile, Jobs: jobs, Operator: true})
}

// Apply adds or updates the given jobs and leaves every other unit alone.
func (m *Manager) Apply(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	return m.do(ctx, Request{Op: OpApply, Jobs: jobs})
}

// Delete stops and removes the units of jobs the core deleted at version
// (0: not said), and leaves tombstones so that no version up to it (none
// at all when not said) comes back. A running service is left to finish; systemd keeps it loaded
// until then.
func (m *Manager) Delete(ctx context.Context, names []string, version int64) (wire.NodeReport, error) {
	return m.do(ctx, Request{Op: OpRemove, Names: names, Version: version})
}

// ApplyThen is Apply without the wait: it queues the change and returns;
// then gets the result unless ctx ends before the change's batch starts
// (nothing is applied for it then). The node's activities complete
// asynchronously with it, so that a change waiting in the queue holds
// neither an activity slot nor an activity's goroutine (issue 16).
func (m *Manager) ApplyThen(ctx context.Context, jobs []wire.Job, then func(wire.NodeReport, error)) error {
	return m.doThen(ctx, Request{Op: OpApply, Jobs: jobs}, then)
}

// DeleteThen is Delete without the wait, as ApplyThen is Apply.
func (m *Manager) DeleteThen(ctx context.Context, names []string, version int64, then func(wire.NodeReport, error)) error {
	return m.doThen(ctx, Request{Op: OpRemove, Names: names, Version: version}, then)
}

// Remove is an operator's removal: like Delete, but without tombstones
// (the job may still be the core's; its next converge puts it back).
func (m *Manager) Remove(ctx context.Context, names []string) (wire.NodeReport, error) {
	return m.do(ctx, Request{Op: OpRemove, Names: names, Operator: true})
}

// Plan returns what req would do, changing nothing.
func (m *Manager) Plan(ctx context.Context, req Request) (Plan, error) {
	release, err := m.acquire(ctx)
	if err != nil {
		return Plan{}, err
	}
	defer release()
	return m.plan(ctx, req)
}

// acquire takes the manager's lock and the node's (nodeLock: the
// operator's one-shot commands run a manager of their own in another
// process), or gives up when ctx ends first. An
// activity waits here behind the node's other changes (after a Temporal
// outage every change that waited arrives at once); one past its deadline
// must not go on waiting and then apply a plan nobody waits for while it
// holds one of the worker's few activity slots: Temporal has retried it
// meanwhile, and the attempts that pile up so starve the next task (a
// run-now) of a slot.
func (m *Manager) acquire(ctx context.Context) (release func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wait for the node's unit lock: %w", err)
	}
	select {
	case m.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the node's unit lock: %w", ctx.Err())
	}
	return m.withNodeLock(ctx, nil)
}

// withNodeLock takes the node's lock for a caller that holds the
// manager's, until ctx ends or wanted (nil: always) says nobody waits,
// and releases both; on an error it releases the manager's.
func (m *Manager) withNodeLock(ctx context.Context, wanted func() bool) (release func(), err error) {
	unlock, err := m.nodeLock().take(ctx, wanted)
	if err != nil {
		<-m.lock
		return nil, err
	}
	return func() { unlock(); <-m.lock }, nil
}

func (m *Manager) nodeLock() nodeLock {
	return nodeLock{path: m.layout.LockPath(), turn: m.layout.turnPath(), without: m.layout.withoutPath(),
		patience: m.lockPatience, busy: m.lockBusy, log: m.log}
}

func (m *Manager) plan(ctx context.Context, req Request) (Plan, error) {
	p, _, err := m.timedPlan(ctx, req, newPhaseTimer())
	return p, err
}

// timedPlan observes and plans, charging each to t (observe, plan).
func (m *Manager) timedPlan(ctx context.Context, req Request, t *phaseTimer) (Plan, Observed, error) {
	if req.Now.IsZero() {
		req.Now = m.now()
	}
	obs, err := m.observe(ctx, req)
	if err != nil {
		return Plan{}, obs, err
	}
	t.lap("observe")
	p, err := MakePlan(m.layout, req, obs)
	if err != nil {
		return Plan{}, obs, err
	}
	nameChanges(m.layout, p.Steps, os.ReadFile)
	t.lap("plan")
	return p, obs, nil
}

func (m *Manager) planAndRun(ctx context.Context, req Request, e *executor) (wire.NodeReport, error) {
	t := newPhaseTimer()
	before := m.stateBefore(ctx, req) // for the stamp an empty plan leaves (fastpath.go)
	t.lap("fingerprint")
	p, obs, err := m.timedPlan(ctx, req, t)
	if err != nil {
		m.dropStamp()
		return wire.NodeReport{}, err
	}
	for _, s := range p.Steps {
		m.log.Debug("unit step", "op", req.Op, "kind", s.Kind, "unit", s.Unit, "target", s.Target, "reason", s.Reason)
	}
	if len(p.Steps) > 0 {
		m.dropStamp() // before the first step: a crash mid-apply leaves no stamp of the state before it
	}
	rep, err := e.run(ctx, p)
	m.settleStamp(req, before, p, obs, err)
	t.lap("apply")
	// One line per reconcile with its three parts (observe and apply log
	// their own phases), so a converge's time on the node is accounted for.
	m.logPhases(req, "planned and applied", t, "jobs", len(req.Jobs), "steps", len(p.Steps))
	return rep, err
}

// CountTimers counts the cron timers in unitDir whose unit file exists and
// those enabled (linked into timers.target.wants), reading the directory
// only: the agent's metrics call it at every scrape.
func CountTimers(unitDir string) (present, enabled int, err error) {
	m := &Manager{layout: Layout{UnitDir: unitDir}}
	timers, err := filepath.Glob(filepath.Join(unitDir, wire.UnitPrefix+"*"+extTimer))
	if err != nil {
		return 0, 0, fmt.Errorf("count cron timers: %w", err)
	}
	on, err := m.enabledTimers()
	if err != nil {
		return 0, 0, err
	}
	for _, p := range timers {
		if on[strings.TrimSuffix(filepath.Base(p), extTimer)] {
			enabled++
		}
	}
	return len(timers), enabled, nil
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
	loaded, err := m.loadedUnits(ctx, listPatterns(nil))
	if err != nil {
		return nil, err
	}
	var out []wire.UnitState
	for name := range names {
		if _, err := os.Stat(m.layout.unitPath(name, extTimer)); err != nil {
			continue // a spec or service without its timer is a leftover the next reconcile removes
		}
		st := wire.UnitState{Name: name, TimerEnabled: enabled[name], TimerActive: loaded[name+extTimer].ActiveState == "active",
			ServiceActive: loaded[name+extService].ActiveState}
		h := sha256.New()
		for _, ext := range []string{extTimer, extService} {
			b, err := os.ReadFile(m.layout.unitPath(name, ext))
			if err != nil {
				return nil, fmt.Errorf("read %s%s: %w", name, ext, err)
			}
			h.Write(b)
		}
		st.Hash = hex.EncodeToString(h.Sum(nil))
		if v, err := m.sys.UnitProperty(ctx, name+extTimer, "Timer", "NextElapseUSecRealtime"); err == nil {
			st.NextElapseUS, _ = v.(uint64)
		}
		if v, err := m.sys.UnitProperty(ctx, name+extService, "Service", "Result"); err == nil {
			st.LastResult, _ = v.(string)
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
