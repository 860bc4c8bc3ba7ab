package unitmgr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
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
	// Version (OpRemove) is the version at which the core deleted the
	// jobs; their tombstones refuse every version up to it (0: the core
	// did not say; the installed version is used).
	Version int64
	// Operator marks an operator's command (the node-agent CLI), not the
	// core's: a reconcile's set is complete (every unit not in it goes,
	// whatever the snapshot), and its removals leave no tombstone, since
	// the core did not delete those jobs and its next converge may put
	// live ones back.
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

// OnDisk is what one unit name has on disk. No file times: what is an
// orphan is decided by the core's snapshot, never by age.
type OnDisk struct {
	Files map[string][]byte // by extension; absent = no file
}

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
	Temps      []TempFile
	LockDirOK  map[string]bool // lock dir path → exists with the right owner and mode
}

func (o Observed) active(unitFile string) bool { return o.Loaded[unitFile].ActiveState == "active" }

// Kind is what a step does.
type Kind string

// Step kinds, in the order a plan runs them.
const (
	KindTombstone Kind = "tombstone" // record removals, so older copies of the jobs stay out
	KindCleanup   Kind = "cleanup"   // remove an atomic-write leftover
	KindStop      Kind = "stop"
	KindDisable   Kind = "disable"
	KindLockDir   Kind = "lockdir" // create/fix the job's lock dir on shared storage
	KindWrite     Kind = "write"
	KindRemove    Kind = "remove"
	KindEnable    Kind = "enable"
	KindReload    Kind = "reload"
	KindStart     Kind = "start"
	KindRestart   Kind = "restart"
)

// Step is one action of a plan.
type Step struct {
	Kind    Kind        `json:"kind"`
	Unit    string      `json:"unit,omitempty"`   // cron-{tenant}-{id}; "" for node-wide steps
	Target  string      `json:"target,omitempty"` // file path, or unit file name for systemd steps
	Content []byte      `json:"-"`
	Mode    os.FileMode `json:"mode,omitempty"`
	User    string      `json:"user,omitempty"` // lockdir owner
	Group   string      `json:"group,omitempty"`
	Reason  string      `json:"reason"`
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
	files   map[string][]byte // by extension; nil when the job could not render
	delete  bool
	enabled bool
	why     string     // why it is deleted
	tomb    *Tombstone // deleted on the core's word: remember it
}

// MakePlan decides, without I/O, what brings the observed state to what
// req asks for.
func MakePlan(l Layout, req Request, obs Observed) (Plan, error) {
	var p Plan
	intents, err := intentsFor(l, req, obs, &p)
	if err != nil {
		return Plan{}, err
	}
	if t, ok := tombstoneStep(l, intents, obs, req.Now); ok {
		p.Steps = append(p.Steps, t)
	}
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
	return p, nil
}

// intentsFor turns the request into one intent per unit name, sorted.
func intentsFor(l Layout, req Request, obs Observed, p *Plan) ([]intent, error) {
	byName := map[string]intent{}
	switch req.Op {
	case OpApply, OpReconcile:
		for i := range req.Jobs {
			j := req.Jobs[i]
			if t, ok := obs.Tombstones[j.UnitName()]; ok && t.Refuses(j, req.Now) {
				p.Stale = append(p.Stale, j.UnitName())
				continue
			}
			in, kept, err := jobIntent(l, j, obs)
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
	case OpRemove:
		for _, n := range req.Names {
			if !validUnitName(n) {
				return nil, fmt.Errorf("remove: %q is not a cron unit name", n)
			}
			byName[n] = removeIntent(n, req, obs)
		}
	default:
		return nil, fmt.Errorf("plan: unknown operation %q", req.Op)
	}
	out := make([]intent, 0, len(byName))
	for _, in := range byName {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// removeIntent deletes a named unit. The core's delete leaves a tombstone
// at the delete's version (or the installed one, if higher or the core
// did not say), so that a version sent before the delete stays out.
func removeIntent(name string, req Request, obs Observed) intent {
	in := intent{name: name, delete: true, why: "removal requested"}
	if req.Operator {
		return in
	}
	in.why = "job deleted"
	if v := max(req.Version, installedSpec(obs, name).Version); v > 0 {
		in.tomb = &Tombstone{Version: v, At: req.Now}
	}
	return in
}

func validUnitName(n string) bool {
	return strings.HasPrefix(n, wire.UnitPrefix) && !strings.ContainsAny(n, "/\x00") && len(n) > len(wire.UnitPrefix)
}

// jobIntent renders a job. A job older than the spec the node has (a
// converge snapshot racing the job's own workflow) is kept as it is. A job
// that does not render still gets its enablement: a disabled job's timer
// stops whatever else is wrong with it.
func jobIntent(l Layout, j wire.Job, obs Observed) (intent, bool, error) {
	in := intent{name: j.UnitName(), job: &j, enabled: j.Enabled}
	if have := installedSpec(obs, in.name); have.ok && have.Version > j.Version {
		return in, true, nil // never revert: a newer version is installed
	}
	uj, spec, err := desired.Translate(j, l.Node)
	if err != nil {
		return in, false, err
	}
	r, err := units.Render(uj, l.Paths)
	if err != nil {
		return in, false, err
	}
	specBytes, err := spec.Marshal()
	if err != nil {
		return in, false, err
	}
	in.files = map[string][]byte{extTimer: r.Timer, extService: r.Service, extSpec: specBytes}
	return in, false, nil
}

// specInfo is what a unit's spec on disk says it was written from.
type specInfo struct {
	Version int64  `json:"version"`
	Rev     uint64 `json:"rev"`
	ok      bool   // there is a readable spec
}

// installedSpec reads the version and revision of a unit's spec. A unit
// without a readable spec (a half-done removal, a spec from before
// revisions) has revision 0, which every real snapshot has seen.
func installedSpec(obs Observed, name string) specInfo {
	var s specInfo
	b := obs.Disk[name].Files[extSpec]
	if b == nil || json.Unmarshal(b, &s) != nil {
		return specInfo{}
	}
	s.ok = true
	return s
}

// addOrphans marks for deletion every cron unit on disk or loaded that the
// desired set lacks and whose installed write the set's snapshot saw: that
// job left the set before the snapshot. One the snapshot did not see may
// have been created after it (its own workflow already wrote it), so it
// stays, reported as kept; a later converge decides. Never by file age: a
// clock or a slow snapshot cannot make a live job look old.
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
		if !req.Operator && !req.Snapshot.Sees(have.Rev) {
			p.Kept = append(p.Kept, name)
			return
		}
		in := intent{name: name, delete: true, why: "orphan: not in the desired set"}
		if !req.Operator {
			snap := req.Snapshot
			in.why = "orphan: not in the desired set, whose snapshot saw the write it was installed from"
			in.tomb = &Tombstone{Version: have.Version, Seen: &snap, At: req.Now}
		}
		byName[name] = in
	}
	var names []string
	for name := range obs.Disk {
		names = append(names, name)
	}
	for file, u := range obs.Loaded {
		if name, ok := strings.CutSuffix(file, extTimer); ok && u.ActiveState == "active" {
			names = append(names, name)
		}
	}
	sort.Strings(names) // a stable report
	for _, name := range names {
		consider(name)
	}
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
// no file can be written afterwards.
func stopSteps(_ Layout, in intent, obs Observed) []Step {
	if in.enabled || !obs.active(in.name+extTimer) {
		return nil
	}
	return []Step{{Kind: KindStop, Unit: in.name, Target: in.name + extTimer, Reason: stopReason(in)}}
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
		Reason: "lock directory missing or not the tenant's with mode 0700"}}
}

// writeSteps write the spec first: it is what a run reads, and it is
// never read by systemd, so a spec-only change needs nothing else.
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
		old, ok := have[f.ext]
		if ok && bytes.Equal(old, in.files[f.ext]) {
			continue
		}
		reason := "new file"
		if ok {
			reason = "changed: " + changedKeys(f.ext, old, in.files[f.ext])
		}
		out = append(out, Step{Kind: KindWrite, Unit: in.name, Target: f.path, Content: in.files[f.ext], Mode: f.mode, Reason: reason})
	}
	return out
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
		if _, ok := have[f.ext]; ok {
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

// reloadStep: one daemon-reload per plan, when a unit file is written or
// removed, when an earlier apply left the dirty marker (it stopped between
// its writes and its reload), or when systemd itself says a cron unit's
// file changed under it. Spec files and enable symlinks never need one.
func reloadStep(steps []Step, obs Observed) (Step, bool) {
	var why []string
	for _, s := range steps {
		if (s.Kind == KindWrite || s.Kind == KindRemove) && isUnitFile(s.Target) {
			why = append(why, "unit files changed")
			break
		}
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

func isUnitFile(path string) bool {
	return strings.HasSuffix(path, extTimer) || strings.HasSuffix(path, extService)
}

// startSteps start the timer of an enabled job that is not running, and
// restart one whose timer file changed (Persistent=no, so a restart never
// fires the job). A service-only change leaves the timer alone.
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
