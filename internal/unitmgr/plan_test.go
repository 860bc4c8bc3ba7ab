package unitmgr

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

var (
	testNow    = time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC)
	testLayout = Layout{UnitDir: "/etc/systemd/system", Paths: units.DefaultPaths}
)

const (
	idA = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	idB = "1b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e72"
	idC = "2b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e73"
)

func job(id string, mods ...func(*wire.Job)) wire.Job {
	j := wire.Job{
		ID: id, Tenant: "acme", Version: 1, Enabled: true, User: "acme", Group: "acme",
		Webroot: "/srv/www/acme/public", WebStorageDir: "/srv/www", Schedule: "*/5 * * * *", Timezone: "UTC",
		Command: "php artisan schedule:run", TimeoutSec: 60, MemoryMaxMB: 64,
	}
	for _, m := range mods {
		m(&j)
	}
	return j
}

func version(v int64) func(*wire.Job) { return func(j *wire.Job) { j.Version = v } }
func rev(r uint64) func(*wire.Job)    { return func(j *wire.Job) { j.Rev = r } }

// testSnap is a converge's snapshot: transactions below 100 had finished,
// 105 was in progress, 110 and above had not started.
var testSnap = wire.Snapshot{Xmin: 100, Xmax: 110, Xip: []uint64{105}}

func disabled(j *wire.Job) { j.Enabled = false }

// installedAt is when installed's specs were written: a day before testNow.
var installedAt = testNow.Add(-24 * time.Hour)

// installed is the state of a node on which jobs were applied a while ago:
// files as rendered, timers enabled and running for enabled jobs, lock
// directories in place.
func installed(t *testing.T, jobs ...wire.Job) Observed {
	t.Helper()
	obs := Observed{Disk: map[string]OnDisk{}, Enabled: map[string]bool{}, Loaded: map[string]LoadedUnit{},
		NeedReload: map[string]bool{}, LockDirOK: map[string]bool{}}
	for _, j := range jobs {
		n := j.UnitName()
		d := OnDisk{SpecMod: installedAt}
		for ext, b := range rendered(t, j) {
			d.diskFile(ext, b)
		}
		obs.Disk[n] = d
		obs.LockDirOK[j.LockDir()] = true
		state := "inactive"
		if j.Enabled {
			obs.Enabled[n] = true
			state = "active"
		}
		obs.Loaded[n+extTimer] = LoadedUnit{Name: n + extTimer, LoadState: "loaded", ActiveState: state}
		obs.Loaded[n+extService] = LoadedUnit{Name: n + extService, LoadState: "loaded", ActiveState: "inactive"}
	}
	return obs
}

// rendered is a job's three files as a node of testLayout writes them,
// by extension.
func rendered(t testing.TB, j wire.Job) map[string][]byte {
	t.Helper()
	return renderedIn(t, testLayout, j)
}

// renderedIn is a job's three files as a node of l writes them.
func renderedIn(t testing.TB, l Layout, j wire.Job) map[string][]byte {
	t.Helper()
	uj, spec, err := desired.Translate(j, l.Node)
	if err != nil {
		t.Fatal(err)
	}
	r, err := units.Render(uj, l.Paths)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := spec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{extTimer: r.Timer, extService: r.Service, extSpec: sb}
}

func empty() Observed {
	return Observed{Disk: map[string]OnDisk{}, Enabled: map[string]bool{}, Loaded: map[string]LoadedUnit{},
		NeedReload: map[string]bool{}, LockDirOK: map[string]bool{}}
}

func with(obs Observed, fn func(*Observed)) Observed { fn(&obs); return obs }

// summary is "kind file" per step, file the base name of the target.
func summary(p Plan) []string {
	var out []string
	for _, s := range p.Steps {
		t := s.Target
		if i := strings.LastIndex(t, "/"); i >= 0 {
			t = t[i+1:]
		}
		out = append(out, strings.TrimSpace(string(s.Kind)+" "+strings.ReplaceAll(t, wire.UnitPrefix+"acme-", "")))
	}
	return out
}

func TestMakePlan(t *testing.T) {
	a, b, c := job(idA), job(idB), job(idC)
	apply := func(jobs ...wire.Job) Request { return Request{Op: OpApply, Jobs: jobs, Now: testNow} }
	cases := []struct {
		name       string
		req        Request
		obs        Observed
		want       []string
		kept, fail int
	}{
		{"create: systemd does not hold the unit, so no reload (the start loads it)", apply(a), empty(), []string{
			"lockdir .locks", "write " + idA + ".json", "write " + idA + ".service", "write " + idA + ".timer",
			"enable " + idA + ".timer", "start " + idA + ".timer"}, 0, 0},
		{"create of a unit systemd holds (named before, loaded inactive): reload",
			apply(a), with(empty(), func(o *Observed) {
				o.Loaded[a.UnitName()+".service"] = LoadedUnit{Name: a.UnitName() + ".service", LoadState: "loaded", ActiveState: "inactive"}
			}), []string{
				"lockdir .locks", "write " + idA + ".json", "write " + idA + ".service", "write " + idA + ".timer",
				"enable " + idA + ".timer", "reload", "start " + idA + ".timer"}, 0, 0},
		{"a unit systemd holds as not found though its file is there: reload, start",
			apply(a), with(installed(t, a), func(o *Observed) {
				o.Loaded[a.UnitName()+".timer"] = LoadedUnit{Name: a.UnitName() + ".timer", LoadState: "not-found", ActiveState: "inactive"}
			}), []string{"reload", "start " + idA + ".timer"}, 0, 0},
		{"unchanged: nothing", apply(a), installed(t, a), nil, 0, 0},
		{"schedule changed: spec and timer rewritten, reload, restart",
			apply(job(idA, version(2), func(j *wire.Job) { j.Schedule = "0 3 * * *" })), installed(t, a),
			[]string{"write " + idA + ".json", "write " + idA + ".timer", "reload", "restart " + idA + ".timer"}, 0, 0},
		{"command changed: only the spec",
			apply(job(idA, version(2), func(j *wire.Job) { j.Command = "echo other" })), installed(t, a),
			[]string{"write " + idA + ".json"}, 0, 0},
		{"timeout changed: service rewritten and reloaded, timer not restarted",
			apply(job(idA, version(2), func(j *wire.Job) { j.TimeoutSec = 120 })), installed(t, a),
			[]string{"write " + idA + ".json", "write " + idA + ".service", "reload"}, 0, 0},
		{"enable: symlink and start, no reload",
			apply(job(idA, version(2))), installed(t, job(idA, disabled)),
			[]string{"write " + idA + ".json", "enable " + idA + ".timer", "start " + idA + ".timer"}, 0, 0},
		{"disable: stop first, then disable, no reload",
			apply(job(idA, version(2), disabled)), installed(t, a),
			[]string{"stop " + idA + ".timer", "disable " + idA + ".timer", "write " + idA + ".json"}, 0, 0},
		{"delete", Request{Op: OpRemove, Names: []string{a.UnitName()}, Version: 2, Now: testNow}, installed(t, a, b), []string{
			"tombstone .tombstones.json", "stop " + idA + ".timer", "disable " + idA + ".timer",
			"remove " + idA + ".timer", "remove " + idA + ".service", "remove " + idA + ".json", "reload"}, 0, 0},
		{"operator's removal of a unit that is not there: nothing", Request{Op: OpRemove, Names: []string{c.UnitName()}, Operator: true, Now: testNow},
			installed(t, a), nil, 0, 0},
		{"reconcile: orphan the snapshot saw removed, one written after it and desired jobs kept",
			Request{Op: OpReconcile, Jobs: []wire.Job{a}, Snapshot: testSnap, Now: testNow},
			installed(t, a, job(idB, rev(90)), job(idC, rev(120))), []string{
				"tombstone .tombstones.json", "stop " + idB + ".timer", "disable " + idB + ".timer",
				"remove " + idB + ".timer", "remove " + idB + ".service", "remove " + idB + ".json", "reload"}, 1, 0},
		{"reconcile: a half-removed unit (spec only) is an orphan",
			Request{Op: OpReconcile, Snapshot: testSnap, Now: testNow},
			with(empty(), func(o *Observed) {
				d := OnDisk{}
				d.diskFile(extSpec, []byte(`{"version":1,"rev":50}`))
				o.Disk[b.UnitName()] = d
			}), []string{"tombstone .tombstones.json", "remove " + idB + ".json"}, 0, 0},
		{"reconcile: a running timer with no files is stopped",
			Request{Op: OpReconcile, Snapshot: testSnap, Now: testNow},
			with(installed(t, b), func(o *Observed) { delete(o.Disk, b.UnitName()); delete(o.Enabled, b.UnitName()) }),
			[]string{"tombstone .tombstones.json", "stop " + idB + ".timer"}, 0, 0},
		{"crash leftover: dirty marker forces a reload",
			apply(a), with(installed(t, a), func(o *Observed) { o.Dirty = true }), []string{"reload"}, 0, 0},
		{"crash leftover: NeedDaemonReload forces a reload",
			apply(a), with(installed(t, a), func(o *Observed) { o.NeedReload[a.UnitName()+extService] = true }), []string{"reload"}, 0, 0},
		{"crash leftover: old temp files removed, a young one (a write in flight) left",
			apply(a), with(installed(t, a), func(o *Observed) {
				o.Temps = []TempFile{
					{Path: "/etc/systemd/system/.tmp-" + a.UnitName() + ".timer-123", ModTime: testNow.Add(-time.Hour)},
					{Path: "/etc/systemd/system/.tmp-" + a.UnitName() + ".service-456", ModTime: testNow.Add(-time.Second)},
				}
			}), []string{"cleanup .tmp-" + idA + ".timer-123"}, 0, 0},
		{"older job than the node has: kept, nothing done",
			apply(job(idA, version(3), disabled)), installed(t, job(idA, version(5))), nil, 1, 0},
		{"broken job that is disabled: its timer still stops",
			apply(job(idA, version(2), disabled, func(j *wire.Job) { j.Schedule = "61 * * * *" })), installed(t, a),
			[]string{"stop " + idA + ".timer", "disable " + idA + ".timer"}, 0, 1},
		{"broken enabled job under reconcile: not an orphan, nothing done",
			Request{Op: OpReconcile, Jobs: []wire.Job{job(idA, func(j *wire.Job) { j.Command = "" })}, Now: testNow},
			installed(t, a), nil, 0, 1},
		{"enabled timer that is not running is started",
			apply(a), with(installed(t, a), func(o *Observed) { o.Loaded[a.UnitName()+extTimer] = LoadedUnit{ActiveState: "failed"} }),
			[]string{"start " + idA + ".timer"}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := MakePlan(testLayout, tc.req, tc.obs)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("steps\n got %q\nwant %q", got, tc.want)
			}
			if len(p.Kept) != tc.kept || len(p.Failed) != tc.fail {
				t.Errorf("kept %v failed %v, want %d kept %d failed", p.Kept, p.Failed, tc.kept, tc.fail)
			}
			for _, s := range p.Steps {
				if s.Reason == "" {
					t.Errorf("step %v has no reason", s)
				}
			}
		})
	}
}

func TestMakePlanReasons(t *testing.T) {
	a := job(idA)
	p, err := MakePlan(testLayout, Request{Op: OpApply, Now: testNow,
		Jobs: []wire.Job{job(idA, version(2), func(j *wire.Job) { j.Schedule = "0 3 * * *" })}},
		with(installed(t, a), func(o *Observed) { o.Dirty = true }))
	if err != nil {
		t.Fatal(err)
	}
	// The plan holds no file's bytes: what changed is named from the files
	// on disk (here a's, as installed) and the job rendered again.
	onDisk := map[string][]byte{}
	for ext, b := range rendered(t, a) {
		onDisk[map[bool]string{true: testLayout.specPath(a.UnitName()), false: testLayout.unitPath(a.UnitName(), ext)}[ext == extSpec]] = b
	}
	nameChanges(testLayout, p.Steps, func(path string) ([]byte, error) {
		if b, ok := onDisk[path]; ok {
			return b, nil
		}
		return nil, os.ErrNotExist
	})
	got := map[Kind]string{}
	for _, s := range p.Steps {
		got[s.Kind] += s.Reason + "|"
	}
	for kind, want := range map[Kind]string{
		KindWrite:   "OnCalendar", // the timer's changed directive is named
		KindReload:  "dirty marker",
		KindRestart: "timer file changed",
	} {
		if !strings.Contains(got[kind], want) {
			t.Errorf("%s reasons %q lack %q", kind, got[kind], want)
		}
	}
	if !strings.Contains(got[KindWrite], "command") && !strings.Contains(got[KindWrite], "version") {
		t.Errorf("spec write reason %q names no field", got[KindWrite])
	}
}

func TestMakePlanRejects(t *testing.T) {
	for _, n := range []string{"sshd", "cron-../../etc/x", "cron-", ""} {
		if _, err := MakePlan(testLayout, Request{Op: OpRemove, Names: []string{n}}, empty()); err == nil {
			t.Errorf("remove %q planned", n)
		}
	}
	if _, err := MakePlan(testLayout, Request{Op: "frobnicate"}, empty()); err == nil {
		t.Error("unknown op planned")
	}
}

// A command-only edit must not touch a unit file (issue 11 rule 3): the
// rendered units do not depend on version or command.
func TestUnitsIndependentOfVersionAndCommand(t *testing.T) {
	a := rendered(t, job(idA))
	b := rendered(t, job(idA, version(9), func(j *wire.Job) { j.Command = "other" }))
	for _, ext := range []string{extTimer, extService} {
		if string(a[ext]) != string(b[ext]) {
			t.Errorf("%s differs between versions:\n%s\n---\n%s", ext, a[ext], b[ext])
		}
	}
	if string(a[extSpec]) == string(b[extSpec]) {
		t.Error("spec does not carry version and command")
	}
}

// BenchmarkMakePlanNoop10k: the planning part of a no-op reconcile of
// 10,000 jobs (render and compare every file).
func BenchmarkMakePlanNoop10k(b *testing.B) {
	t := &testing.T{}
	jobs := make([]wire.Job, 10000)
	for i := range jobs {
		jobs[i] = job(fmt.Sprintf("%08x-3c8e-4a57-9e0a-2f4f5c9d8e71", i))
	}
	obs := installed(t, jobs...)
	req := Request{Op: OpReconcile, Jobs: jobs, Now: testNow}
	b.ResetTimer()
	for range b.N {
		p, err := MakePlan(testLayout, req, obs)
		if err != nil || len(p.Steps) != 0 {
			b.Fatalf("%v %v", err, p.Steps)
		}
	}
}
