package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/wire"
)

// executor runs a plan's steps.
type executor struct {
	sys     Systemd
	layout  Layout
	log     *slog.Logger
	lockDir func(dir, user, group string) error // ensureLockDir; a fake in tests
	obs     Observer                            // nil: reloads are not timed
	steps   map[string]int                      // steps executed, by kind (nil: not counted)
	// lockDirs is what ensuring each lock directory came to in this run
	// (nil error: done): a tenant's jobs share one, and on CephFS every
	// mkdir, chown and chmod is a round trip to the metadata server, so
	// a new node pays it once per tenant, not once per job.
	lockDirs map[lockDirKey]error
	// endCatchUp stops a unit's catch-up that has not started its command
	// (Manager.endCatchUp); nil: the step does nothing (tests).
	endCatchUp func(ctx context.Context, unit string) error
}

type lockDirKey struct{ dir, user, group string }

// afterIO is called after each file or systemd operation of an apply
// with what was just done; a test kills the process there (SIGKILL, as
// kill -9 or a power cut would) to prove that the next converge recovers
// from a crash between any two operations.
var afterIO = func(what string) {}

// ensureLockDir runs the lock directory step once per directory and
// owner in a run; later steps for it share the first one's result.
func (e *executor) ensureLockDir(s Step) error {
	k := lockDirKey{s.Target, s.User, s.Group}
	if err, done := e.lockDirs[k]; done {
		return err
	}
	err := e.lockDir(s.Target, s.User, s.Group)
	if e.lockDirs == nil {
		e.lockDirs = map[lockDirKey]error{}
	}
	e.lockDirs[k] = err
	return err
}

// count records a step (or a batch of n) as executed.
func (e *executor) count(k Kind, n int) {
	if e.steps != nil && n > 0 {
		e.steps[string(k)] += n
	}
}

// errReload marks a failed daemon-reload: the node's, not one unit's, so
// a batch that hit it is not retried change by change (runBatch).
var errReload = errors.New("daemon-reload")

// unitError is a failure of one unit's own step (a stop, the end of a
// catch-up, a start): in a batch of several callers' changes it is the
// error of the caller that asked for that unit only (splitResult).
type unitError struct {
	unit string
	err  error
}

func (e *unitError) Error() string { return e.err.Error() }
func (e *unitError) Unwrap() error { return e.err }

// run executes p and reports as the workflows expect. A step of a unit
// whose earlier step failed is skipped, except stop and disable: they
// only take the unit towards "not running", which is always safe, and a
// disabled job must stop even when its files cannot be written. A failed
// node-wide systemd call (enable, disable, reload) or removal ends the
// run with an error, since what follows depends on it; a unit's failed
// stop or start (each touches that unit alone) is returned, as a
// unitError, after the rest ran, so one job's broken timer does not leave
// the other jobs of a batch unstarted.
func (e *executor) run(ctx context.Context, p Plan) (wire.NodeReport, error) {
	rep := wire.NodeReport{Failed: append([]string(nil), p.Failed...), Kept: append([]string(nil), p.Kept...),
		Stale: append([]string(nil), p.Stale...)}
	failed := map[string]bool{}
	deleting := map[string]bool{}
	for _, s := range p.Steps {
		if s.Kind == KindRemove {
			deleting[s.Unit] = true
		}
	}
	var unitErrs []error
	// The dirty marker is for plans that reload: a plan without a reload
	// writes only files of units systemd does not hold (reloadStep), which
	// a crash leaves for systemd to load when the next plan starts them.
	marked := !hasReload(p.Steps)
	// markBefore writes the marker before a batch's first unit file
	// changes.
	markBefore := func(batch []Step) {
		if !marked && anyUnitFile(batch) {
			e.mark()
			afterIO("mark")
			marked = true
		}
	}
	rechecked := false // reloadIfLoadedMeanwhile ran
	keepTombs := false // an unreadable tombstone file could not be set aside
	t := newPhaseTimer()
	var cur Kind // the kind of step whose time is running
	defer func() {
		if cur != "" {
			t.lap(string(cur))
		}
		e.logPhases(t, len(p.Steps))
	}()
	for i := 0; i < len(p.Steps); i++ {
		s := p.Steps[i]
		if cur != "" {
			t.lap(string(cur))
		}
		cur = s.Kind
		if failed[s.Unit] && s.Kind != KindStop && s.Kind != KindDisable {
			continue
		}
		if !batched(s.Kind) {
			e.count(s.Kind, 1) // a batch counts below, by its members
		}
		switch s.Kind {
		case KindSetAside:
			keepTombs = !e.setAsideTombstones(s)
		case KindTombstone:
			if !keepTombs {
				e.writeTombstones(s)
			}
		case KindCleanup:
			if err := os.Remove(s.Target); err != nil && !errors.Is(err, os.ErrNotExist) {
				e.log.Warn("remove atomic-write leftover", "path", s.Target, "err", err)
			}
		case KindStop:
			if err := e.sys.StopUnit(ctx, s.Target); err != nil {
				unitErrs = append(unitErrs, &unitError{s.Unit, fmt.Errorf("stop %s: %w", s.Target, err)})
			}
		case KindEndCatchUp:
			if e.endCatchUp != nil {
				if err := e.endCatchUp(ctx, s.Unit); err != nil {
					unitErrs = append(unitErrs, &unitError{s.Unit, fmt.Errorf("end catch-up of %s: %w", s.Target, err)})
				}
			}
		case KindDisable, KindEnable:
			n, batch := sameKind(p.Steps[i:], failed)
			i += n - 1
			if len(batch) == 0 {
				continue
			}
			e.count(s.Kind, len(batch))
			if err := e.setEnablement(ctx, s.Kind, batch, deleting, &rep); err != nil {
				return rep, errors.Join(append(unitErrs, err)...)
			}
			afterIO(string(s.Kind))
		case KindLockDir:
			if err := e.ensureLockDir(s); err != nil {
				e.lockDirFailed(&rep, failed, s, err)
			}
		case KindWrite:
			n, batch := sameKind(p.Steps[i:], failed)
			i += n - 1
			markBefore(batch)
			e.count(s.Kind, len(batch))
			if err := e.writeBatch(batch, failed, &rep, t); err != nil {
				return rep, errors.Join(append(unitErrs, err)...)
			}
		case KindRemove:
			n, batch := sameKind(p.Steps[i:], failed)
			i += n - 1
			markBefore(batch)
			e.count(s.Kind, len(batch))
			if err := e.removeBatch(batch, &rep); err != nil {
				return rep, errors.Join(append(unitErrs, err)...)
			}
			afterIO("remove dirsync")
		case KindReload:
			if err := e.reload(ctx, &rep); err != nil {
				return rep, errors.Join(append(unitErrs, err)...)
			}
			e.unmark()
		case KindStart, KindRestart:
			n := activations(p.Steps[i:])
			i += n - 1
			steps := p.Steps[i-n+1 : i+1]
			if !hasReload(p.Steps) && !rechecked {
				rechecked = true
				if err := e.reloadIfLoadedMeanwhile(ctx, p.Steps, failed, &rep); err != nil {
					return rep, errors.Join(append(unitErrs, err)...)
				}
			}
			if startTogether(hasReload(p.Steps), steps) {
				unitErrs = append(unitErrs, e.startAll(ctx, steps, failed)...)
			} else {
				unitErrs = append(unitErrs, e.activateAll(ctx, steps, failed)...)
			}
		}
	}
	return rep, errors.Join(unitErrs...)
}

func (e *executor) fail(rep *wire.NodeReport, failed map[string]bool, s Step, err error) {
	failed[s.Unit] = true
	rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", s.Unit, err))
	e.log.Error("apply cron job", "unit", s.Unit, "step", s.Kind, "err", err)
}

// lockDirFailed fails the unit of an enabled job whose lock directory
// could not be made: its timer must not start runs that cannot lock. A
// disabled job's unit goes on: its spec is the node's record of the
// disable's version, which keeps an older, enabled copy of the job (a
// converge read before the disable, a late retry) from starting the
// timer again; only a run-now needs the directory, and the next converge
// plans it again.
func (e *executor) lockDirFailed(rep *wire.NodeReport, failed map[string]bool, s Step, err error) {
	if s.job != nil && !s.job.Enabled {
		e.log.Warn("lock directory of a disabled job not made; its files are written all the same", "unit", s.Unit, "dir", s.Target, "err", err)
		return
	}
	e.fail(rep, failed, s, err)
}

func hasReload(steps []Step) bool {
	for _, s := range steps {
		if s.Kind == KindReload {
			return true
		}
	}
	return false
}

// batched kinds run as one batch per run of consecutive steps of the
// kind, and are counted by the batch's members.
func batched(k Kind) bool {
	return k == KindDisable || k == KindEnable || k == KindWrite || k == KindRemove || k == KindStart || k == KindRestart
}

// sameKind returns the length of the run of steps of the first step's
// kind, and that run without the steps of failed units (a disable is
// never dropped: see run).
func sameKind(steps []Step, failed map[string]bool) (int, []Step) {
	n := 0
	var batch []Step
	for _, s := range steps {
		if s.Kind != steps[0].Kind {
			break
		}
		n++
		if s.Kind != KindDisable && failed[s.Unit] {
			continue
		}
		batch = append(batch, s)
	}
	return n, batch
}

func anyUnitFile(steps []Step) bool {
	for _, s := range steps {
		if isUnitFile(s.Target) {
			return true
		}
	}
	return false
}

// setEnablement enables or disables a batch of timers in one D-Bus call.
// Timers of removed units are disabled but not reported as disabled.
func (e *executor) setEnablement(ctx context.Context, kind Kind, batch []Step, deleting map[string]bool, rep *wire.NodeReport) error {
	var files []string
	for _, s := range batch {
		files = append(files, s.Target)
	}
	if kind == KindEnable {
		if err := e.enableLinks(files); err != nil {
			return fmt.Errorf("enable timers: %w", err)
		}
		rep.Enabled = append(rep.Enabled, files...)
		return nil
	}
	if err := e.sys.DisableUnitFiles(ctx, files); err != nil {
		return fmt.Errorf("disable timers: %w", err)
	}
	for _, s := range batch {
		if !deleting[s.Unit] {
			rep.Disabled = append(rep.Disabled, s.Target)
		}
	}
	return nil
}

// writeBatch writes a plan's file writes with one sync for all of them
// (atomicfile.Batch): every file goes to a temporary name, one syncfs
// makes them all durable, then each is renamed into place in plan order
// (a unit's spec before its service and timer), and one fsync per
// directory makes the renames durable. The dirty marker is already on
// disk (run marks before the batch), so a crash anywhere in here makes
// the next plan reload. A unit whose file cannot be written is failed
// and its later files are not renamed: its spec stays the old one, or a
// new spec sits beside old unit files, as when a write failed before.
//
// A write's content is rendered here, one unit at a time, and staged at
// once (the plan holds only its sum: FileSum). A rendering that does not
// hash to the planned sum is the agent's fault, not the job's: the batch
// ends before any rename (its temporary files are removed), and the
// error ends the run, so the change is retried rather than reported as a
// failed job; nothing unplanned is written.
func (e *executor) writeBatch(steps []Step, failed map[string]bool, rep *wire.NodeReport, t *phaseTimer) error {
	var b atomicfile.Batch
	defer b.Close()
	idx := make([]int, len(steps))
	dirs := map[string]error{}
	keptSpecs := false
	defer func() { e.pruneKept(keptSpecs) }()
	var r rendering
	for k, s := range steps {
		idx[k] = -1
		if failed[s.Unit] {
			continue
		}
		content, err := r.content(e.layout, s)
		if err != nil {
			e.log.Error("a file rendered for writing is not the planned one; nothing of this batch written", "path", s.Target, "err", err)
			return err
		}
		if !isUnitFile(s.Target) {
			e.keepReplacedSpec(s, content) // before its rename replaces the spec a running run reads
			keptSpecs = true
		}
		if err := e.mkdirOnce(dirs, filepath.Dir(s.Target)); err != nil {
			e.fail(rep, failed, s, err)
			continue
		}
		i, err := b.Add(s.Target, content, s.Mode)
		if err != nil {
			e.fail(rep, failed, s, err)
			continue
		}
		idx[k] = i
		afterIO("stage " + s.Target)
	}
	t.lap("write_stage")
	if err := b.Sync(); err != nil {
		for k, s := range steps {
			if idx[k] >= 0 && !failed[s.Unit] {
				e.fail(rep, failed, s, err)
			}
		}
		return nil
	}
	afterIO("sync")
	t.lap("write_sync")
	// Specs first, made durable before any unit file is renamed: after a
	// power loss a new timer never comes back with the old spec (the
	// order a write per file with its own directory fsync kept).
	for _, units := range []bool{false, true} {
		for k, s := range steps {
			if idx[k] < 0 || failed[s.Unit] || isUnitFile(s.Target) != units {
				continue
			}
			if err := b.Rename(idx[k]); err != nil {
				e.fail(rep, failed, s, err)
				continue
			}
			afterIO("rename " + s.Target)
			if units {
				rep.Written = append(rep.Written, filepath.Base(s.Target))
			} else {
				rep.Specs = append(rep.Specs, s.Unit)
			}
		}
		t.lap("write_rename")
		if err := b.SyncDirs(); err != nil {
			if !units {
				// The specs' renames may not survive a power loss: no
				// unit file may be renamed after them, or a new timer
				// could come back beside an old spec. Their units fail
				// (the callers are retried; a new timer's old spec is
				// what the next converge repairs, not the reverse).
				for k, s := range steps {
					if idx[k] >= 0 && !failed[s.Unit] {
						e.fail(rep, failed, s, fmt.Errorf("spec directory not synced: %w", err))
					}
				}
				return nil
			}
			// The unit files are in place and systemd will read them;
			// only their survival of a power loss is in doubt, which the
			// next converge repairs (it finds them old or missing and
			// writes them again).
			e.log.Warn("sync unit directories after writing", "err", err)
		}
		afterIO("dirsync")
		t.lap("write_dirsync")
	}
	return nil
}

// errUnplanned marks a write whose content, rendered again, is not the
// one planned.
var errUnplanned = errors.New("rendering differs from the plan's")

// rendering is the last unit a write rendered: a unit's writes are
// consecutive steps (writeSteps), so each job renders once.
type rendering struct {
	job                  *wire.Job
	timer, service, spec []byte
	err                  error
}

// content is what the write step s writes: its own Content if it has one,
// else its job's file rendered again, which must hash to the planned sum
// (errUnplanned otherwise, as when it no longer renders at all).
func (r *rendering) content(l Layout, s Step) ([]byte, error) {
	if s.job == nil {
		return s.Content, nil
	}
	if r.job != s.job {
		r.job = s.job
		r.timer, r.service, r.spec, r.err = renderFiles(l, s.job)
	}
	if r.err != nil { // it rendered when planned: not the job's fault either
		return nil, fmt.Errorf("write %s: %w: rendering it again failed: %v", s.Target, errUnplanned, r.err)
	}
	b := fileOf(extOf(s.Target), r.timer, r.service, r.spec)
	if got := sumOf(b); got != s.Sum {
		return nil, fmt.Errorf("write %s: %w (size %d, planned %d)", s.Target, errUnplanned, got.Size, s.Sum.Size)
	}
	return b, nil
}

// mkdirOnce creates a file's directory once per batch.
func (e *executor) mkdirOnce(done map[string]error, dir string) error {
	err, ok := done[dir]
	if !ok {
		err = os.MkdirAll(dir, 0o700)
		if err != nil {
			err = fmt.Errorf("create directory %s: %w", dir, err)
		}
		done[dir] = err
	}
	return err
}

// removeBatch removes a plan's files, then fsyncs each directory once,
// so a removal survives a power loss before the next converge (the
// timer of a deleted job must not come back with the files). A file
// that cannot be removed ends the run: what follows (the reload) would
// load a unit the plan meant to be gone.
func (e *executor) removeBatch(steps []Step, rep *wire.NodeReport) error {
	dirs := map[string]bool{}
	keptSpecs := false
	defer func() { e.pruneKept(keptSpecs) }()
	for _, s := range steps {
		if !isUnitFile(s.Target) {
			e.keepReplacedSpec(s, nil)
			keptSpecs = true
		}
		if err := os.Remove(s.Target); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", s.Target, err)
		}
		afterIO("remove " + s.Target)
		dirs[filepath.Dir(s.Target)] = true
		if n := len(rep.Removed); n == 0 || rep.Removed[n-1] != s.Unit {
			rep.Removed = append(rep.Removed, s.Unit)
		}
	}
	for dir := range dirs {
		if err := atomicfile.SyncDir(dir); err != nil {
			e.log.Warn("sync directory after removing files", "dir", dir, "err", err)
		}
	}
	return nil
}

// enableLinks enables timers as `systemctl enable` does a unit whose
// only [Install] line is WantedBy=timers.target (templates/units/
// cron.timer.tmpl): a link timers.target.wants/NAME.timer pointing to
// the unit file, which is all enabling is (systemd reads the link when
// timers.target starts, at boot; the timer runs now because the plan
// starts it). systemd's EnableUnitFiles searched every unit path for
// every file: 14 s for 10,000 timers in one call (issue 16); this is
// one symlink each. A wrong link in the way is replaced atomically (a
// new link under a temporary name, renamed over it), as systemd's force
// does; one fsync of the directory makes the links durable.
// enabledTimers reads the same directory, and DisableUnitFiles removes
// these links as it removes its own.
func (e *executor) enableLinks(files []string) error {
	wants := filepath.Join(e.layout.UnitDir, "timers.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		link, target := filepath.Join(wants, f), filepath.Join(e.layout.UnitDir, f)
		if have, err := os.Readlink(link); err == nil && have == target {
			continue
		}
		if err := os.Symlink(target, link); err == nil {
			continue
		} else if !errors.Is(err, os.ErrExist) {
			return err
		}
		// Not a unit name systemd would take from a .wants directory (no
		// unit type ends in .link~): a crash leaves nothing it starts.
		tmp := filepath.Join(wants, atomicfile.TempPrefix+f+".link~")
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, link); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	return atomicfile.SyncDir(wants)
}

// pruneKeptSpecs is jobspec.PruneKept; a test counts the calls.
var pruneKeptSpecs = jobspec.PruneKept

// keepReplacedSpec keeps the spec s replaces (with next) or removes (next
// nil), so a run that started under it still reports after a schedule
// change or a delete (jobspec.KeepReplaced; the hook cannot read the run's own copy). A spec
// that cannot be kept does not hold up the change: that run's outcome is
// then refused by the hook and the slot is recorded lost. The batch
// prunes the kept specs once its keeps are done (pruneKept).
func (e *executor) keepReplacedSpec(s Step, next []byte) {
	if err := jobspec.KeepReplaced(s.Target, s.Unit, next); err != nil {
		e.log.Warn("replaced job spec not kept: a run under way may go unreported", "unit", s.Unit, "err", err)
	}
}

// pruneKept drops the expired kept specs when the batch wrote or removed a
// spec (whether or not it kept one): one read of the spec dir's kept specs
// per batch, not per spec. A failed prune leaves old copies for the next
// batch and costs no job.
func (e *executor) pruneKept(specsChanged bool) {
	if !specsChanged {
		return
	}
	if err := pruneKeptSpecs(e.layout.Paths.SpecDir, time.Now()); err != nil {
		e.log.Warn("prune kept job specs", "dir", e.layout.Paths.SpecDir, "err", err)
	}
}

// activations is the length of the run of start and restart steps at
// the head of steps (the plan's last phase).
func activations(steps []Step) int {
	n := 0
	for n < len(steps) && (steps[n].Kind == KindStart || steps[n].Kind == KindRestart) {
		n++
	}
	return n
}

// activateAll starts or restarts the timers of steps (skipping failed
// units) one call at a time, in plan order, and returns each unit's
// failure as a unitError: a timer is independent of the others, so one
// job's broken timer does not leave the rest of a batch unstarted.
// (Several calls in flight gained nothing: 10,000 starts took 11.8 s with
// 4 against 9.8 s one at a time in the same bench run, and 0.80 s against
// 0.92 s for 1,000; PID 1 does the work either way: docs/benchmarks.md.)
func (e *executor) activateAll(ctx context.Context, steps []Step, failed map[string]bool) []error {
	var errs []error
	for _, s := range steps {
		if failed[s.Unit] {
			continue
		}
		e.count(s.Kind, 1)
		if err := e.activate(ctx, s); err != nil {
			errs = append(errs, &unitError{s.Unit, err})
			continue
		}
		afterIO(string(s.Kind) + " " + s.Target)
	}
	return errs
}

// minStartTogether is the fewest starts worth one transaction: it costs
// a transient unit (a fork of /bin/true) and polling for its jobs, where
// a lone start costs one call.
const minStartTogether = 8

// reloadIfLoadedMeanwhile closes the window of a plan without a reload
// (reloadStep: it writes only unit files systemd did not hold when the
// node was observed). Something may have loaded one of those units from
// its old file before the write: a run-now (it does not wait for the
// manager's lock), an operator's systemctl. systemd would then run the
// old definition until some later reload, and a reconcile does not ask
// systemd whether a unit needs one. So before the first start, one
// ListUnits: if any unit file the plan wrote belongs to a unit systemd
// now holds, it reloads (rep.Reloads = 1). A unit loaded after its write
// read the new file; reloading for it too costs time, never correctness.
func (e *executor) reloadIfLoadedMeanwhile(ctx context.Context, steps []Step, failed map[string]bool, rep *wire.NodeReport) error {
	written := map[string]bool{}
	var units []string
	seen := map[string]bool{}
	for _, s := range steps {
		if s.Kind == KindWrite && isUnitFile(s.Target) && !failed[s.Unit] {
			if !seen[s.Unit] { // a unit's two files
				seen[s.Unit] = true
				units = append(units, s.Unit)
			}
			written[filepath.Base(s.Target)] = true
		}
	}
	if len(written) == 0 {
		return nil
	}
	held, err := e.sys.ListUnits(ctx, nil, listPatterns(units))
	if err != nil {
		return fmt.Errorf("list units before starting those written without a reload: %w", err)
	}
	for _, u := range held {
		if !written[u.Name] {
			continue
		}
		e.log.Info("a unit written without a reload was loaded meanwhile; reloading", "unit", u.Name)
		return e.reload(ctx, rep)
	}
	return nil
}

// reloadTimeout bounds a daemon-reload the agent waits for, far above
// any measured here (63 s at 10,000 timers with three nodes' PID 1s on 2
// cores), so that only a PID 1 that hangs reaches it.
const reloadTimeout = 10 * time.Minute

// reload runs systemd's daemon-reload, timed for the observer, and counts
// it in rep. It waits for the reload to end even when every caller has
// given up (their deadlines passed, the agent stops): a reload once asked
// of PID 1 runs to its end whatever the agent does, so abandoning the
// wait only left the dirty marker, and the callers' retries asked PID 1
// for a second reload behind the first. Waited for, it clears the marker
// and the retries find their changes applied. At 10,000 timers a
// reload's 37-63 s here outlast a queued change's 60 s deadline.
func (e *executor) reload(ctx context.Context, rep *wire.NodeReport) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reloadTimeout)
	defer cancel()
	start := time.Now()
	err := e.sys.Reload(ctx)
	if e.obs != nil {
		e.obs.Reloaded(time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errReload, err)
	}
	rep.Reloads = 1
	afterIO("reload")
	return nil
}

// startTogether decides whether a plan's starts go to systemd as one
// transaction (startAll) rather than one call each. Only in a plan
// without a daemon-reload: there, the timers to start are either new to
// systemd (reloadStep: their files were written with no reload), and
// loading each in its own start call cost ~10 ms a unit (1,000 new
// timers: 12.4 s against 4.5 s in one transaction), or loaded and
// inactive. After a reload every timer is loaded, and one call each was
// no slower than the transaction (docs/benchmarks.md, "The systemd side
// of a converge"). Restarts always go one by one.
func startTogether(reloads bool, steps []Step) bool {
	if reloads {
		return false
	}
	n := 0
	for _, s := range steps {
		if s.Kind == KindStart {
			n++
		}
	}
	return n >= minStartTogether
}

// startAll starts the timers of steps' start steps in one systemd
// transaction, then starts one by one (activateAll) the restarts and
// every timer the transaction did not leave active: a timer that fails
// to load or start is thereby reported by its own call, as a unitError,
// exactly as without the transaction (the apply queue's isolation of a
// failing change depends on it). If the transaction itself fails, every
// step goes one by one. A crash anywhere in here leaves timers inactive
// that the next converge starts (start jobs already queued run anyway).
func (e *executor) startAll(ctx context.Context, steps []Step, failed map[string]bool) []error {
	var timers, units []string
	for _, s := range steps {
		if s.Kind == KindStart && !failed[s.Unit] {
			timers, units = append(timers, s.Target), append(units, s.Unit)
		}
	}
	if err := e.sys.StartUnits(ctx, timers); err != nil {
		e.log.Warn("start timers in one transaction; starting them one by one", "timers", len(timers), "err", err)
		return e.activateAll(ctx, steps, failed)
	}
	afterIO("start together")
	patterns := listPatterns(units)
	if slices.Equal(patterns, listPatterns(nil)) {
		patterns = []string{wire.UnitPrefix + "*" + extTimer} // all of them, but only timers
	}
	loaded, err := e.sys.ListUnits(ctx, nil, patterns)
	if err != nil {
		e.log.Warn("list timers after starting them together; starting them one by one", "err", err)
		return e.activateAll(ctx, steps, failed)
	}
	started := map[string]bool{}
	for _, u := range loaded {
		started[u.Name] = u.ActiveState == "active"
	}
	rest := notStarted(steps, started)
	e.count(KindStart, len(steps)-len(rest))
	return e.activateAll(ctx, rest, failed)
}

// notStarted is steps without the start steps of timers started holds as
// active.
func notStarted(steps []Step, started map[string]bool) []Step {
	var rest []Step
	for _, s := range steps {
		if s.Kind != KindStart || !started[s.Target] {
			rest = append(rest, s)
		}
	}
	return rest
}

func (e *executor) activate(ctx context.Context, s Step) error {
	var err error
	if s.Kind == KindRestart {
		err = e.sys.RestartUnit(ctx, s.Target)
	} else {
		err = e.sys.StartUnit(ctx, s.Target)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.Kind, s.Target, err)
	}
	return nil
}

// mark writes the dirty marker before the first unit file changes. If it
// cannot be written (a full disk), the apply goes on: the writes will
// likely fail too, and NeedDaemonReload still catches a half-done change
// of a unit systemd had loaded.
func (e *executor) mark() {
	p := e.layout.Marker()
	err := os.MkdirAll(filepath.Dir(p), 0o700)
	if err == nil {
		err = atomicfile.Write(p, []byte("unit files changed; daemon-reload pending\n"), 0o600)
	}
	if err != nil {
		e.log.Warn("write dirty marker", "path", p, "err", err)
	}
}

// unmark removes the marker after a successful reload.
func (e *executor) unmark() {
	if err := os.Remove(e.layout.Marker()); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Warn("remove dirty marker", "err", err)
	}
}

// writeTombstones stores the tombstone file. A failure (a full disk) is
// logged and the removals go on: stopping a deleted job matters more than
// refusing a stale copy of it later, which a converge would remove again.
// setAsideTombstones moves an unreadable tombstone file to s.Target, so
// the write that follows does not destroy what it held. If it cannot, the
// file stays and is not rewritten (false): the plan's removals go on
// without new tombstones, as when the write fails.
func (e *executor) setAsideTombstones(s Step) bool {
	if err := os.Rename(e.layout.TombstonePath(), s.Target); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Error("set aside the unreadable tombstone file; not rewritten, removed jobs are not protected from stale copies",
			"path", e.layout.TombstonePath(), "err", err)
		return false
	}
	e.log.Error("tombstone file was unreadable: set aside, its tombstones are lost", "path", s.Target)
	return true
}

func (e *executor) writeTombstones(s Step) {
	err := os.MkdirAll(filepath.Dir(s.Target), 0o700)
	if err == nil {
		err = atomicfile.Write(s.Target, s.Content, s.Mode)
	}
	if err != nil {
		e.log.Error("write tombstones; removed jobs are not protected from stale copies", "path", s.Target, "err", err)
	}
}
