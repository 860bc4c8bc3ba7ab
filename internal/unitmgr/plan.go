package unitmgr

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// Op is what a call asks of the node's units.
type Op string

// Operations.
const (
	OpApply     Op = "apply"     // add or update these jobs, leave others alone
	OpReconcile Op = "reconcile" // exactly these jobs: orphans go
	OpRemove    Op = "remove"    // remove these unit names
	// OpBatch is what the apply queue makes of the core's applies and
	// deletes of different jobs that waited together (mergeBatch): add or
	// update Jobs, remove Names each at its own version (Versions), leave
	// others alone.
	OpBatch Op = "batch"
)

// Request is one operation on the node's cron units.
type Request struct {
	Op    Op
	Jobs  []wire.Job // OpApply, OpReconcile
	Names []string   // OpRemove: cron-{tenant}-{id}
	// Snapshot (OpReconcile) is the core's snapshot the desired set was
	// read in: a unit the set lacks is an orphan only if the snapshot saw
	// the write the unit was installed from; otherwise the job may have
	// been created after it.
	Snapshot wire.Snapshot
	// Pages (OpReconcile of a set read in pages) are the pages' id ranges
	// with their own snapshots (Snapshot is their Common): each job is
	// judged by the page that answered for its id (snapshotFor). nil for
	// a set read in one snapshot.
	Pages wire.PageSnapshots
	// Version (OpRemove) is the version at which the core deleted the
	// jobs; their tombstones refuse every version up to it (0: the core
	// did not say, a task from before versions were sent; the tombstone
	// refuses every version, since a deleted job's id never comes back).
	Version int64
	// Versions (OpBatch) is the delete version of each of Names, as
	// Version is for an OpRemove of them alone.
	Versions map[string]int64
	// Operator marks an operator's command (the node-agent CLI), not the
	// core's: a reconcile's set is complete (every unit not in it goes,
	// whatever the snapshot), tombstones never refuse its jobs (it lifts
	// theirs), and its removals leave no tombstone, since the core did not
	// delete those jobs and its next converge may put live ones back.
	Operator bool
	Now      time.Time
}

// TempMaxAge is how old an atomic-write temp file must be before a plan
// removes it: a younger one may belong to a write in flight in another
// process (a `node-agent apply` beside the daemon).
const TempMaxAge = time.Minute

// Layout is where a node keeps its units, specs and the dirty marker.
type Layout struct {
	UnitDir string
	Paths   units.Paths
	// Node is what the node adds to every job's units (IPAddressDeny=).
	Node desired.Node
}

// dirtyMarker names the file apply writes before its first unit file
// change and removes after the daemon-reload that covers it.
const dirtyMarker = ".units-dirty"

// Marker is the path of the dirty marker.
func (l Layout) Marker() string { return filepath.Join(l.Paths.SpecDir, dirtyMarker) }

func (l Layout) unitPath(name, ext string) string { return filepath.Join(l.UnitDir, name+ext) }
func (l Layout) specPath(name string) string      { return filepath.Join(l.Paths.SpecDir, name+".json") }

// Extensions of a job's three files, as keys of OnDisk.Files.
const (
	extTimer   = ".timer"
	extService = ".service"
	extSpec    = ".json"
)

// OnDisk is what one unit name has on disk: of each file, whether it is
// there, its size and hash (FileSum), never its bytes, and what the spec
// says it was written from. What is an orphan is decided by the core's
// snapshot, not by age; the spec's time only serves specs without a
// revision (LegacyOrphanAge).
type OnDisk struct {
	Files     JobFiles
	Installed specInfo  // the spec's version and revision (not ok: no readable spec)
	SpecMod   time.Time // the spec's modification time; zero without one
}

// JobFiles are the sums of one job's three files.
type JobFiles struct {
	Timer, Service, Spec FileSum
}

// get is the sum of the file with extension ext.
func (f *JobFiles) get(ext string) FileSum {
	switch ext {
	case extTimer:
		return f.Timer
	case extService:
		return f.Service
	}
	return f.Spec
}

func (f *JobFiles) set(ext string, s FileSum) {
	switch ext {
	case extTimer:
		f.Timer = s
	case extService:
		f.Service = s
	default:
		f.Spec = s
	}
}

// any reports whether any of the files is there.
func (f *JobFiles) any() bool { return f.Timer.Exists || f.Service.Exists || f.Spec.Exists }

// FileSum stands for a file's content in a plan: its size and a 64-bit
// keyed hash (hash/maphash with a seed drawn at the agent's start), so a
// plan of 10,000 jobs holds 24 bytes a file instead of its 0.8-2.7 KB
// (issue 16: the files were most of the agent's 106-116 MiB). Two
// contents are taken as equal when size and hash are: observe sums what
// it reads, the plan sums what it renders and drops the rendering, and
// the apply renders again and writes only what hashes to the planned sum
// (executor.content).
//
// Why a 64-bit keyed hash and not SHA-256: equal sums of different
// contents make a plan skip a write it needed (the file stays as it was,
// and a later change of the job rewrites it). With the seed unknown
// outside the agent's memory and new at every start, a tenant cannot
// choose a command or schedule that collides; by chance, two different
// contents of the same size collide with probability 2^-64, about 10^-15
// for a converge's 30,000 comparisons. SHA-256 would make that 2^-256
// at 0.94 GB/s on this project's machine against maphash's 10 GB/s: 75 ms
// more CPU for a no-op converge of 10,000 jobs (it hashes 70 MB: every
// file read, every file rendered), against a 0.3 s goal.
type FileSum struct {
	Size   int64
	Hash   uint64
	Exists bool // false: no such file (Size and Hash are zero)
}

// sumSeed keys FileSum's hash for the life of the process: sums are
// compared only within it (never stored).
var sumSeed = maphash.MakeSeed()

// sumOf is the FileSum of a file holding b.
func sumOf(b []byte) FileSum {
	return FileSum{Size: int64(len(b)), Hash: maphash.Bytes(sumSeed, b), Exists: true}
}

// LegacyOrphanAge is how old a spec without a revision (rev 0: written by
// an agent from before revisions, or from a job a core worker from before
// them loaded, in a rolling upgrade) must be before a converge may remove
// its unit as an orphan. No snapshot can be said to have seen such a write,
// so the age stands in for it: far beyond the age a converge's set can
// have when it reaches the node (a signed task is refused past max_age,
// at most trust.MaxMaxAge, 1 h). A younger one is kept and reported; the
// next converge that lists the job rewrites its spec with the revision.
const LegacyOrphanAge = time.Hour

// TempFile is a leftover of an interrupted atomic write.
type TempFile struct {
	Path    string
	ModTime time.Time
}

// Observed is what the disk and systemd say before a plan.
type Observed struct {
	Tombstones map[string]Tombstone  // by unit name, as the tombstone file has them
	Disk       map[string]OnDisk     // by unit name
	Enabled    map[string]bool       // unit names whose timer is enabled
	Loaded     map[string]LoadedUnit // by unit file name (x.timer, x.service)
	NeedReload map[string]bool       // unit file names systemd reports NeedDaemonReload=yes for
	Dirty      bool                  // the dirty marker exists
	// TombstonesUnreadable: the tombstone file exists but could not be
	// read or decoded (Tombstones is then empty); a plan that rewrites it
	// sets it aside first.
	TombstonesUnreadable bool
	Temps                []TempFile
	LockDirOK            map[string]bool // lock dir path → exists with the right owner and mode
}

// active tells whether a unit runs or will run without another start:
// active, or inactive with a start queued (a timer's start waits for
// time-sync.target at boot). A disable must stop such a timer too: its
// queued start would run after the disable and fire the job.
func (o Observed) active(unitFile string) bool {
	u := o.Loaded[unitFile]
	return u.ActiveState == "active" || startQueued(u.JobType)
}

// startQueued tells whether a queued job of this type leaves its unit
// running (every type but stop).
func startQueued(jobType string) bool { return jobType != "" && jobType != "stop" }

// Kind is what a step does.
type Kind string

// Step kinds, in the order a plan runs them.
const (
	KindSetAside   Kind = "set-aside" // move an unreadable tombstone file aside before it is rewritten
	KindTombstone  Kind = "tombstone" // record removals, so older copies of the jobs stay out
	KindCleanup    Kind = "cleanup"   // remove an atomic-write leftover
	KindStop       Kind = "stop"
	KindEndCatchUp Kind = "end-catchup" // SIGTERM to the service's runner if it is a catch-up not yet running its command
	KindDisable    Kind = "disable"
	KindLockDir    Kind = "lockdir" // create/fix the job's lock dir on shared storage
	KindWrite      Kind = "write"
	KindRemove     Kind = "remove"
	KindEnable     Kind = "enable"
	KindReload     Kind = "reload"
	KindStart      Kind = "start"
	KindRestart    Kind = "restart"
)

// Step is one action of a plan.
type Step struct {
	Kind    Kind        `json:"kind"`
	Unit    string      `json:"unit,omitempty"`   // cron-{tenant}-{id}; "" for node-wide steps
	Target  string      `json:"target,omitempty"` // file path, or unit file name for systemd steps
	Content []byte      `json:"-"`                // a tombstone step's file (a write's is rendered when it runs)
	Mode    os.FileMode `json:"mode,omitempty"`
	User    string      `json:"user,omitempty"` // lockdir owner
	Group   string      `json:"group,omitempty"`
	Reason  string      `json:"reason"`
	// Sum and job (a write): the executor renders job's file again and
	// writes it only if it hashes to Sum, the planned content's.
	Sum FileSum `json:"-"`
	job *wire.Job
}

func (s Step) String() string {
	what := s.Target
	if what == "" {
		what = s.Unit
	}
	return strings.TrimSpace(fmt.Sprintf("%-8s %s", s.Kind, what)) + " — " + s.Reason
}

// Plan is what an operation will do, in order.
type Plan struct {
	Steps  []Step   `json:"steps"`
	Failed []string `json:"failed,omitempty"` // jobs that cannot be applied, with the reason
	Kept   []string `json:"kept,omitempty"`   // jobs the node has in a newer version, or newer than the snapshot
	Stale  []string `json:"stale,omitempty"`  // jobs refused by a tombstone: removed at their version or later
}

// intent is the wanted end state of one unit name.
type intent struct {
	name    string
	job     *wire.Job
	files   *JobFiles // the sums of the rendered files; nil when the job could not render
	delete  bool
	enabled bool
	why     string     // why it is deleted
	tomb    *Tombstone // deleted on the core's word: remember it
}

// MakePlan decides, without I/O, what brings the observed state to what
// req asks for.
func MakePlan(l Layout, req Request, obs Observed) (Plan, error) {
	var p Plan
	intents, lift, err := intentsFor(l, req, obs, &p)
	if err != nil {
		return Plan{}, err
	}
	p.Steps = append(p.Steps, tombstoneSteps(l, intents, lift, obs, req.Now)...)
	p.Steps = append(p.Steps, cleanupSteps(obs, req.Now)...)
	for _, phase := range []func(Layout, intent, Observed) []Step{stopSteps, disableSteps, lockDirSteps, writeSteps, removeSteps, enableSteps} {
		for _, in := range intents {
			p.Steps = append(p.Steps, phase(l, in, obs)...)
		}
	}
	if r, ok := reloadStep(p.Steps, obs); ok {
		p.Steps = append(p.Steps, r)
	}
	for _, in := range intents {
		p.Steps = append(p.Steps, startSteps(l, in, obs, p.Steps)...)
	}
	planned()
	runtime.KeepAlive(intents) // what planned measures is all that a plan holds at once
	runtime.KeepAlive(obs)
	return p, nil
}

// planned is called when MakePlan has made its steps, while the
// observation and the intents are still held: the most a converge holds
// at once (with the set), where the memory benchmark measures the live
// heap.
var planned = func() {}

// intentsFor turns the request into one intent per unit name, sorted,
// and names the tombstones the request lifts.
func intentsFor(l Layout, req Request, obs Observed, p *Plan) ([]intent, []string, error) {
	byName := map[string]intent{}
	var lift []string
	switch req.Op {
	case OpApply, OpReconcile, OpBatch:
		rendered := renderAll(l, req.Jobs, obs)
		for i := range req.Jobs {
			j := req.Jobs[i]
			if t, ok := obs.Tombstones[j.UnitName()]; ok && t.Refuses(j, req.Now) {
				if !lifts(req, j.UnitName(), t) {
					p.Stale = append(p.Stale, j.UnitName())
					continue
				}
				lift = append(lift, j.UnitName())
			}
			r := rendered[i]
			in, kept, err := r.in, r.kept, r.err
			switch {
			case kept:
				p.Kept = append(p.Kept, j.UnitName())
				continue
			case err != nil:
				p.Failed = append(p.Failed, fmt.Sprintf("%s: %v", j.UnitName(), err))
			}
			byName[in.name] = in
		}
		if req.Op == OpReconcile {
			addOrphans(byName, req, obs, p)
		}
		if req.Op == OpBatch {
			if err := addRemovals(byName, req, obs); err != nil {
				return nil, nil, err
			}
		}
	case OpRemove:
		for _, n := range req.Names {
			if !validUnitName(n) {
				return nil, nil, fmt.Errorf("remove: %q is not a cron unit name", n)
			}
			byName[n] = removeIntent(n, req, obs)
		}
	default:
		return nil, nil, fmt.Errorf("plan: unknown operation %q", req.Op)
	}
	out := make([]intent, 0, len(byName))
	for _, in := range byName {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, lift, nil
}

// addRemovals adds a batch's deletes, each with its own version: the
// intent an OpRemove of that name alone at that version would have.
func addRemovals(byName map[string]intent, req Request, obs Observed) error {
	for _, n := range req.Names {
		if !validUnitName(n) {
			return fmt.Errorf("remove: %q is not a cron unit name", n)
		}
		alone := Request{Op: OpRemove, Version: req.Versions[n], Operator: req.Operator, Now: req.Now}
		byName[n] = removeIntent(n, alone, obs)
	}
	return nil
}

// lifts reports whether req installs a job whose tombstone t refuses it,
// and lifts the tombstone: an operator's command (the operator said so),
// or a converge whose snapshot is newer than the one that found the job
// gone and lists it. A listed job in such a snapshot is alive (a delete
// is final, and the set never holds a job being deleted), so that finding
// was wrong: a unit removed on weak evidence. A delete's tombstone is
// never lifted by the core: no snapshot says when the delete committed.
func lifts(req Request, name string, t Tombstone) bool {
	return req.Operator || (req.Op == OpReconcile && t.LiftedBy(req.snapshotFor(name)))
}

// snapshotFor is the snapshot that answered whether the job of unit name
// is in a reconcile's set: for a set read in pages, that of the page whose
// id range holds the job's id; otherwise (one read, or a name without a
// job id) the set's snapshot.
//
// Why the page's, not the Common of all pages: that page read the job's
// whole id range in its own snapshot, so it alone said whether the job
// was there; for that job it is one read of the set, and every rule of
// "Orphans, snapshots and tombstones" holds for it as for a set read at
// once. It never removes a live job: a unit it lacks whose write it saw
// belongs to a job deleted before it (had the job been there, the page
// would have listed it). It never keeps a deleted one longer: it sees
// every write Common sees, so it removes every orphan Common would, and
// its tombstone refuses every stale copy Common's would, and also those
// written between Common and the page, which the page saw before it found
// the job gone (Common's tombstone would let them reinstall the job until
// the delete's own removal came). A tombstone is lifted only by a page
// that lists the job and is newer than the finding (LiftedBy).
func (req Request) snapshotFor(name string) wire.Snapshot {
	if _, id, ok := wire.SplitUnitName(name); ok && wire.ValidID(id) {
		if s, ok := req.Pages.For(id); ok {
			return s
		}
	}
	return req.Snapshot
}

// removeIntent deletes a named unit. The core's delete leaves a tombstone
// at the delete's version (or the installed one, if higher), so that a
// version sent before the delete stays out. A delete that does not say
// its version (a task from before versions were sent) refuses every
// version: a deleted job's id never comes back (the store makes ids, and
// a delete is final), and the node may never have had the job at all.
func removeIntent(name string, req Request, obs Observed) intent {
	in := intent{name: name, delete: true, why: "removal requested"}
	if req.Operator {
		return in
	}
	in.why = "job deleted"
	v := max(req.Version, installedSpec(obs, name).Version)
	if req.Version == 0 {
		v = AnyVersion
	}
	in.tomb = &Tombstone{Version: v, Deleted: true, At: req.Now}
	return in
}

func validUnitName(n string) bool {
	return strings.HasPrefix(n, wire.UnitPrefix) && !strings.ContainsAny(n, "/\x00") && len(n) > len(wire.UnitPrefix)
}

type renderedJob struct {
	in   intent
	kept bool
	err  error
}

// renderers is how many jobs a plan renders at once.
const renderers = 8

// renderAll is jobIntent of every job, several at once: rendering (the
// job's translation and its two unit templates) is most of a no-op
// converge's planning, 10,000 jobs a time. Each result depends on its
// job alone, so the plan is the same as rendered one by one.
func renderAll(l Layout, jobs []wire.Job, obs Observed) []renderedJob {
	out := make([]renderedJob, len(jobs))
	inParallel(len(jobs), renderers, func(i int) {
		r := &out[i]
		r.in, r.kept, r.err = jobIntent(l, &jobs[i], obs)
	})
	return out
}

// inParallel calls fn(i) for each i below n on up to workers goroutines
// and returns when every call has: fn writes only its own index's result.
func inParallel(n, workers int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// jobIntent renders a job and keeps the sums of its files, not their
// bytes: a plan holds every job of the set until it has run, and the
// rendered files were most of what it held (issue 16, about 4 KB a job).
// A job older than the spec the node has (a converge snapshot racing the
// job's own workflow) is kept as it is. A job that does not render still
// gets its enablement: a disabled job's timer stops whatever else is
// wrong with it. j must outlive the plan (a write step renders it again).
func jobIntent(l Layout, j *wire.Job, obs Observed) (intent, bool, error) {
	in := intent{name: j.UnitName(), job: j, enabled: j.Enabled}
	if have := installedSpec(obs, in.name); have.ok && have.Version > j.Version {
		return in, true, nil // never revert: a newer version is installed
	}
	timer, service, spec, err := renderFiles(l, j)
	if err != nil {
		return in, false, err
	}
	in.files = &JobFiles{Timer: sumOf(timer), Service: sumOf(service), Spec: sumOf(spec)}
	return in, false, nil
}

// renderFiles renders a job's timer, service and spec, as a plan sums
// them and a write writes them: pure and deterministic, so rendering the
// same job with the same layout again gives the same bytes (the executor
// checks that it did).
func renderFiles(l Layout, j *wire.Job) (timer, service, spec []byte, err error) {
	uj, sp, err := desired.Translate(*j, l.Node)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := units.Render(uj, l.Paths)
	if err != nil {
		return nil, nil, nil, err
	}
	specBytes, err := sp.Marshal()
	if err != nil {
		return nil, nil, nil, err
	}
	return r.Timer, r.Service, specBytes, nil
}

// fileOf picks the file of ext from a job's rendering.
func fileOf(ext string, timer, service, spec []byte) []byte {
	switch ext {
	case extTimer:
		return timer
	case extService:
		return service
	}
	return spec
}

// extOf is the extension of a job's file at path (extSpec for a spec).
func extOf(path string) string {
	switch {
	case strings.HasSuffix(path, extTimer):
		return extTimer
	case strings.HasSuffix(path, extService):
		return extService
	}
	return extSpec
}

// specInfo is what a unit's spec on disk says it was written from.
type specInfo struct {
	Version int64  `json:"version"`
	Rev     uint64 `json:"rev"`
	ok      bool   // there is a readable spec
}

// installedSpec is the version and revision of a unit's spec, as
// observe read them (parseSpecInfo). A spec from before revisions has
// revision 0 (ok); a unit without a readable spec (a leftover: an install
// writes the spec first) is not ok.
func installedSpec(obs Observed, name string) specInfo {
	return obs.Disk[name].Installed
}

// parseSpecInfo reads the version and revision of a spec's content.
func parseSpecInfo(b []byte) specInfo {
	var s specInfo
	if b == nil || json.Unmarshal(b, &s) != nil {
		return specInfo{}
	}
	s.ok = true
	return s
}

// diskFile records in d the file of ext holding b: its sum and, for a
// spec, what it says it was written from. The bytes are not kept.
func (d *OnDisk) diskFile(ext string, b []byte) {
	d.Files.set(ext, sumOf(b))
	if ext == extSpec {
		d.Installed = parseSpecInfo(b)
	}
}

// addOrphans marks for deletion every cron unit on disk or loaded that the
// desired set lacks and whose installed write the snapshot that found it
// absent saw (snapshotFor: the set's, or its page's): that job left the
// set before the snapshot, which its tombstone records. One the snapshot
// did not see may have been created after it (its own workflow already
// wrote it), so it stays, reported as kept; a later converge decides. Not
// by file age: a clock or a slow snapshot cannot make a live job look
// old. The exception is a spec without a revision, which no snapshot can
// be said to have seen (orphanEvidence).
func addOrphans(byName map[string]intent, req Request, obs Observed, p *Plan) {
	done := map[string]bool{}
	for _, j := range req.Jobs {
		done[j.UnitName()] = true
	}
	consider := func(name string) {
		if _, seen := byName[name]; seen || done[name] {
			return
		}
		done[name] = true
		have := installedSpec(obs, name)
		in := intent{name: name, delete: true, why: "orphan: not in the desired set"}
		if !req.Operator {
			snap := req.snapshotFor(name)
			why, ok := orphanEvidence(req, snap, obs.Disk[name], have)
			if !ok {
				p.Kept = append(p.Kept, name)
				return
			}
			in.why = why
			in.tomb = &Tombstone{Version: have.Version, Seen: &snap, At: req.Now}
		}
		byName[name] = in
	}
	var names []string
	for name := range obs.Disk {
		names = append(names, name)
	}
	for file := range obs.Loaded {
		if name, ok := strings.CutSuffix(file, extTimer); ok && obs.active(file) {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a stable report
	for _, name := range names {
		consider(name)
	}
}

// orphanEvidence says why a unit the core's desired set lacks may go, or
// false if it must stay, judged by snap, the snapshot that found it
// absent (Request.snapshotFor). The zero snapshot (a converge from before
// snapshots) sees nothing and removes nothing. A spec with a revision goes
// if the snapshot saw that write. A spec without one (rev 0) is unknown,
// not seen: it goes only once it is older than LegacyOrphanAge, the
// upgrade path for units of jobs deleted while their node was down before
// revisions. A unit without a readable spec is a leftover (an install
// writes the spec first) and goes on any real snapshot.
func orphanEvidence(req Request, snap wire.Snapshot, d OnDisk, have specInfo) (string, bool) {
	switch {
	case snap.Xmax == 0:
		return "", false
	case !have.ok:
		return "orphan: not in the desired set, and no readable spec", true
	case have.Rev == 0:
		if d.SpecMod.IsZero() || req.Now.Sub(d.SpecMod) < LegacyOrphanAge {
			return "", false
		}
		return fmt.Sprintf("orphan: not in the desired set; its spec has no revision and is older than %s", LegacyOrphanAge), true
	case snap.Sees(have.Rev):
		return "orphan: not in the desired set, whose snapshot saw the write it was installed from", true
	}
	return "", false
}

func cleanupSteps(obs Observed, now time.Time) []Step {
	var out []Step
	for _, t := range obs.Temps {
		if now.Sub(t.ModTime) >= TempMaxAge {
			out = append(out, Step{Kind: KindCleanup, Target: t.Path, Reason: "leftover of an interrupted atomic write"})
		}
	}
	return out
}

// stopSteps come first, so a disable or delete stops the timer even when
// no file can be written afterwards. A busy service whose job is disabled,
// deleted or changed may be a catch-up waiting out its spread, decided
// under the spec that is going: it is told to end (KindEndCatchUp; the
// executor signals it only if its record says so), never stopped, since
// a run under way is not killed by a disable.
func stopSteps(_ Layout, in intent, obs Observed) []Step {
	var out []Step
	if !in.enabled && obs.active(in.name+extTimer) {
		out = append(out, Step{Kind: KindStop, Unit: in.name, Target: in.name + extTimer, Reason: stopReason(in)})
	}
	if busy(obs.Loaded[in.name+extService].ActiveState) && (!in.enabled || newVersion(in, obs)) {
		why := stopReason(in)
		if in.enabled {
			why = "job changed"
		}
		out = append(out, Step{Kind: KindEndCatchUp, Unit: in.name, Target: in.name + extService, Reason: why + ": a catch-up waiting to run is stopped"})
	}
	return out
}

// newVersion reports whether in installs another version of the job than
// the installed spec's (a converge that rewrites the same version, say
// with a new revision, changes nothing a runner decided on).
func newVersion(in intent, obs Observed) bool {
	return in.job != nil && in.files != nil && in.job.Version != installedSpec(obs, in.name).Version
}

func stopReason(in intent) string {
	if in.delete {
		return in.why
	}
	return "job is disabled"
}

func disableSteps(_ Layout, in intent, obs Observed) []Step {
	if in.enabled || !obs.Enabled[in.name] {
		return nil
	}
	return []Step{{Kind: KindDisable, Unit: in.name, Target: in.name + extTimer, Reason: stopReason(in)}}
}

func lockDirSteps(_ Layout, in intent, obs Observed) []Step {
	if in.files == nil || obs.LockDirOK[in.job.LockDir()] {
		return nil
	}
	return []Step{{Kind: KindLockDir, Unit: in.name, Target: in.job.LockDir(), User: in.job.User, Group: in.job.Group,
		Reason: "lock directory missing or not the tenant's with mode 0700", job: in.job}}
}

// writeSteps write the spec first: it is what a run reads, and it is
// never read by systemd, so a spec-only change needs nothing else. A file
// whose size and hash equal the rendering's is not written. A changed
// file's reason is reasonChanged until nameChanges names what changed.
func writeSteps(l Layout, in intent, obs Observed) []Step {
	if in.files == nil {
		return nil
	}
	have := obs.Disk[in.name].Files
	var out []Step
	for _, f := range []struct {
		ext, path string
		mode      os.FileMode
	}{{extSpec, l.specPath(in.name), 0o600}, {extService, l.unitPath(in.name, extService), 0o644}, {extTimer, l.unitPath(in.name, extTimer), 0o644}} {
		old, want := have.get(f.ext), in.files.get(f.ext)
		if old == want {
			continue
		}
		reason := "new file"
		if old.Exists {
			reason = reasonChanged
		}
		out = append(out, Step{Kind: KindWrite, Unit: in.name, Target: f.path, Sum: want, job: in.job, Mode: f.mode, Reason: reason})
	}
	return out
}

// reasonChanged is a write's reason for a file that is there and differs
// from the rendering; nameChanges adds what differs.
const reasonChanged = "changed"

// nameChanges names, in the reason of each write that replaces a file,
// what differs between the file and its rendering (the directives of a
// unit file, the fields of a spec): the plan holds neither's bytes, so
// the old file is read again (read) and the job rendered again, one at a
// time. It decides nothing: a file that cannot be read or rendered keeps
// the reason "changed".
func nameChanges(l Layout, steps []Step, read func(path string) ([]byte, error)) {
	for i := range steps {
		s := &steps[i]
		if s.Kind != KindWrite || s.Reason != reasonChanged || s.job == nil {
			continue
		}
		old, err := read(s.Target)
		if err != nil {
			continue
		}
		timer, service, spec, err := renderFiles(l, s.job)
		if err != nil {
			continue
		}
		ext := extOf(s.Target)
		s.Reason = reasonChanged + ": " + changedKeys(ext, old, fileOf(ext, timer, service, spec))
	}
}

func removeSteps(l Layout, in intent, obs Observed) []Step {
	if !in.delete {
		return nil
	}
	have := obs.Disk[in.name].Files
	var out []Step
	for _, f := range []struct{ ext, path string }{
		{extTimer, l.unitPath(in.name, extTimer)}, {extService, l.unitPath(in.name, extService)}, {extSpec, l.specPath(in.name)},
	} {
		if have.get(f.ext).Exists {
			out = append(out, Step{Kind: KindRemove, Unit: in.name, Target: f.path, Reason: in.why})
		}
	}
	return out
}

// enableSteps need no daemon-reload: enabling only adds the
// timers.target.wants symlink, which systemd reads when timers.target
// starts (at boot, from disk); the timer runs because we start it.
func enableSteps(_ Layout, in intent, obs Observed) []Step {
	if !in.enabled || in.files == nil || obs.Enabled[in.name] {
		return nil
	}
	return []Step{{Kind: KindEnable, Unit: in.name, Target: in.name + extTimer, Reason: "job is enabled, its timer is not"}}
}

// reloadStep: one daemon-reload per plan, when a unit file of a unit
// systemd holds in memory is written or removed, when an earlier apply
// left the dirty marker (it stopped between its writes and its reload),
// when systemd itself says a cron unit's file changed under it, or when it
// holds a unit as not found whose file is there. Spec files and enable
// symlinks never need one, and neither do the files of a unit systemd
// does not hold at all (ListUnits lists every unit in memory, whatever its
// state): systemd loads such a unit from disk when it is first named (the
// plan's start), and a reload would re-read every unit on the node to
// learn nothing (issue 16: 12 s of a new node's first converge of 10,000
// jobs). Such a plan starts its timers in one transaction (executor
// startTogether): started one call each, every start loading its unit
// cost more than the reload saved (131 s against 28 s at 10,000 jobs).
// A unit named between the observe and the start is held as not found;
// systemd (246 and later) loads it again once the unit directory
// changed, and if not, the next plan sees it not found and reloads. One
// loaded in that window from an older file systemd reports as
// NeedDaemonReload, which the next plan reloads for.
func reloadStep(steps []Step, obs Observed) (Step, bool) {
	var why []string
	for _, s := range steps {
		if (s.Kind == KindWrite || s.Kind == KindRemove) && isUnitFile(s.Target) && inMemory(obs, s.Unit) {
			why = append(why, "unit files changed")
			break
		}
	}
	if stale := notFound(obs); len(stale) > 0 {
		why = append(why, "systemd holds "+strings.Join(stale, ", ")+" as not found though its file is there")
	}
	if obs.Dirty {
		why = append(why, "dirty marker: an earlier apply stopped before its reload")
	}
	var stale []string
	for f, yes := range obs.NeedReload {
		if yes {
			stale = append(stale, f)
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		why = append(why, "systemd reports NeedDaemonReload for "+strings.Join(stale, ", "))
	}
	if len(why) == 0 {
		return Step{}, false
	}
	return Step{Kind: KindReload, Reason: strings.Join(why, "; ")}, true
}

// inMemory reports whether systemd holds either unit file of a unit.
func inMemory(obs Observed, unit string) bool {
	_, timer := obs.Loaded[unit+extTimer]
	_, service := obs.Loaded[unit+extService]
	return timer || service
}

// notFound lists the unit files on disk that systemd holds as not found
// (sorted, at most a few named).
func notFound(obs Observed) []string {
	var out []string
	for name, d := range obs.Disk {
		for _, ext := range []string{extTimer, extService} {
			if d.Files.get(ext).Exists && obs.Loaded[name+ext].LoadState == "not-found" {
				out = append(out, name+ext)
			}
		}
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("%d more", len(out)-3))
	}
	return out
}

func isUnitFile(path string) bool {
	return strings.HasSuffix(path, extTimer) || strings.HasSuffix(path, extService)
}

// startSteps start the timer of an enabled job that is not running, and
// restart one whose timer file changed (with Persistent=no a restart never
// fires the job; with a catch-up window's Persistent=yes it may fire a
// slot missed while the timer was stopped, which the runner runs only as
// that slot's catch-up, never a second time). A service-only change leaves
// the timer alone.
func startSteps(l Layout, in intent, obs Observed, planned []Step) []Step {
	if !in.enabled || in.files == nil {
		return nil
	}
	timer := in.name + extTimer
	switch {
	case !obs.active(timer):
		return []Step{{Kind: KindStart, Unit: in.name, Target: timer, Reason: "job is enabled, its timer is not running"}}
	case wrote(planned, l.unitPath(in.name, extTimer)):
		return []Step{{Kind: KindRestart, Unit: in.name, Target: timer, Reason: "timer file changed (schedule or delay)"}}
	}
	return nil
}

func wrote(steps []Step, path string) bool {
	for _, s := range steps {
		if s.Kind == KindWrite && s.Target == path {
			return true
		}
	}
	return false
}

// changedKeys names what differs between two versions of a file: the
// directives of a unit file, the fields of a spec.
func changedKeys(ext string, old, new []byte) string {
	var a, b map[string]string
	if ext == extSpec {
		a, b = jsonFields(old), jsonFields(new)
	} else {
		a, b = directives(old), directives(new)
	}
	var keys []string
	for k := range a {
		if a[k] != b[k] {
			keys = append(keys, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "comments or layout"
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func directives(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] += v + "\n"
		}
	}
	return out
}

func jsonFields(b []byte) map[string]string {
	var m map[string]json.RawMessage
	out := map[string]string{}
	if json.Unmarshal(b, &m) != nil {
		out["(unreadable)"] = string(b)
		return out
	}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}
