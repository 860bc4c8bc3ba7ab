package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// fakeSystemd records calls and keeps a tiny model of timer activity.
type fakeSystemd struct {
	mu           sync.Mutex
	calls        []string
	active       map[string]bool // unit file name → active
	failStart    error
	failUnit     string // when set, only this unit's start fails with failStart
	failRload    error
	failTogether error         // when set, StartUnits fails as a whole
	inReload     chan struct{} // when set, Reload blocks until it is closed
	onReload     func()        // when set, called in every Reload (before inReload)
	needRload    map[string]bool
	wantsDir     string          // enable and disable make and remove links here, as systemd does
	held         map[string]bool // unit files systemd holds in memory (loaded, inactive) besides the active ones
	listed       [][]string      // the patterns of each ListUnits call
}

// hold makes systemd hold jobs' unit files in memory (as after an
// earlier load), so that writing them needs a daemon-reload.
func (f *fakeSystemd) hold(jobs ...wire.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = map[string]bool{}
	}
	for _, j := range jobs {
		f.held[j.UnitName()+".timer"], f.held[j.UnitName()+".service"] = true, true
	}
}

func newFake() *fakeSystemd {
	return &fakeSystemd{active: map[string]bool{}, needRload: map[string]bool{}}
}

func (f *fakeSystemd) record(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeSystemd) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeSystemd) Reload(ctx context.Context) error {
	f.record("reload")
	f.mu.Lock()
	onReload := f.onReload
	f.mu.Unlock()
	if onReload != nil {
		onReload()
	}
	if f.inReload != nil {
		select {
		case <-f.inReload:
		case <-ctx.Done():
		}
	}
	if err := ctx.Err(); err != nil {
		return err // as D-Bus: the caller stops waiting (PID 1 does not)
	}
	return f.failRload
}
func (f *fakeSystemd) EnableUnitFiles(_ context.Context, files []string) error {
	f.record("enable %s", strings.Join(files, ","))
	for _, n := range files {
		if err := os.Symlink("../"+n, filepath.Join(f.wantsDir, n)); err != nil {
			return err
		}
	}
	return nil
}
func (f *fakeSystemd) DisableUnitFiles(_ context.Context, files []string) error {
	f.record("disable %s", strings.Join(files, ","))
	for _, n := range files {
		if err := os.Remove(filepath.Join(f.wantsDir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
func (f *fakeSystemd) StartUnit(ctx context.Context, n string) error {
	f.record("start %s", n)
	if err := ctx.Err(); err != nil {
		return err // as a D-Bus call on an ended context
	}
	if f.failStart != nil && (f.failUnit == "" || f.failUnit == n) {
		return f.failStart
	}
	f.mu.Lock()
	f.active[n] = true
	f.mu.Unlock()
	return nil
}

// StartUnits models one transaction: every unit that StartUnit would
// start becomes active, the others stay as they were, and the call
// itself succeeds unless failTogether is set.
func (f *fakeSystemd) StartUnits(ctx context.Context, names []string) error {
	f.record("start-together %s", strings.Join(names, ","))
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failTogether != nil {
		return f.failTogether
	}
	for _, n := range names {
		if f.failStart == nil || (f.failUnit != "" && f.failUnit != n) {
			f.active[n] = true
		}
	}
	return nil
}
func (f *fakeSystemd) StopUnit(_ context.Context, n string) error {
	f.record("stop %s", n)
	f.mu.Lock()
	delete(f.active, n)
	f.mu.Unlock()
	return nil
}
func (f *fakeSystemd) RestartUnit(_ context.Context, n string) error {
	f.record("restart %s", n)
	return nil
}

// ListUnits filters as systemd's ListUnitsByPatterns does: a unit is
// listed if a state names its load or active state and a pattern
// (fnmatch, which path.Match equals for unit names) matches its name; no
// states or no patterns: any.
func (f *fakeSystemd) ListUnits(_ context.Context, states, patterns []string) ([]LoadedUnit, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listed = append(f.listed, patterns)
	var all []LoadedUnit
	for n, a := range f.active {
		if a {
			all = append(all, LoadedUnit{Name: n, LoadState: "loaded", ActiveState: "active"})
		}
	}
	for n := range f.held {
		if !f.active[n] {
			all = append(all, LoadedUnit{Name: n, LoadState: "loaded", ActiveState: "inactive"})
		}
	}
	var out []LoadedUnit
	for _, u := range all {
		if listed(u, states, patterns) {
			out = append(out, u)
		}
	}
	return out, nil
}

func listed(u LoadedUnit, states, patterns []string) bool {
	if len(states) > 0 && !slices.Contains(states, u.LoadState) && !slices.Contains(states, u.ActiveState) {
		return false
	}
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(p, u.Name); ok {
			return true
		}
	}
	return false
}
func (f *fakeSystemd) UnitProperty(_ context.Context, unit, _, name string) (any, error) {
	if name == "NeedDaemonReload" {
		return f.needRload[unit], nil
	}
	return nil, errors.New("no such property")
}

// testManager is a Manager on temp dirs and a fake systemd.
func testManager(t testing.TB) (*Manager, *fakeSystemd) {
	t.Helper()
	dir := t.TempDir()
	f := newFake()
	paths := units.DefaultPaths
	paths.SpecDir = filepath.Join(dir, "jobs")
	m := New(f, filepath.Join(dir, "system"), paths, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.lockDir = func(string, string, string) error { return nil }
	m.lockDirOK = func(string, string, string) bool { return true }
	f.wantsDir = filepath.Join(dir, "system", "timers.target.wants")
	m.now = func() time.Time { return testNow }
	if err := os.MkdirAll(filepath.Join(dir, "system", "timers.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	return m, f
}

// Units systemd holds (B, C: loaded earlier) get one reload for all;
// units it has never seen (A) need none, it loads them at their start.
func TestApplyCreateOrderAndOneReload(t *testing.T) {
	m, f := testManager(t)
	f.hold(job(idB), job(idC))
	rep, err := m.Apply(context.Background(), []wire.Job{job(idA), job(idB), job(idC)})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := job(idA).UnitName()+".timer", job(idB).UnitName()+".timer", job(idC).UnitName()+".timer"
	want := []string{"reload", "start " + a, "start " + b, "start " + c}
	got := f.Calls()
	if len(got) > 1 {
		slices.Sort(got[1:]) // the starts are in flight together, in any order
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
	// Enabled as systemctl enable does (WantedBy=timers.target), by the
	// agent itself: a link to each timer's file in timers.target.wants.
	for _, timer := range []string{a, b, c} {
		link, err := os.Readlink(filepath.Join(m.layout.UnitDir, "timers.target.wants", timer))
		if want := filepath.Join(m.layout.UnitDir, timer); err != nil || link != want {
			t.Errorf("enable link of %s: %q %v, want %q", timer, link, err, want)
		}
	}
	if len(rep.Written) != 6 || len(rep.Specs) != 3 || len(rep.Enabled) != 3 || rep.Reloads != 1 || len(rep.Failed) != 0 {
		t.Errorf("report %+v", rep)
	}
	if _, err := os.Stat(m.layout.Marker()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dirty marker left after the reload: %v", err)
	}
	for _, p := range []string{m.layout.unitPath(job(idA).UnitName(), ".timer"), m.layout.specPath(job(idA).UnitName())} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("file not written: %v", err)
		}
	}
}

// A tenant's jobs share one lock directory: a new node checks and creates
// it once, not once per job, and a failure to create it fails each of
// the tenant's jobs.
func TestLockDirOncePerTenant(t *testing.T) {
	for _, fail := range []bool{false, true} {
		m, _ := testManager(t)
		checked, made := map[string]int{}, map[string]int{}
		m.lockDirOK = func(dir, _, _ string) bool { checked[dir]++; return false }
		m.lockDir = func(dir, _, _ string) error {
			made[dir]++
			if fail {
				return errors.New("read-only file system")
			}
			return nil
		}
		other := job(idC, func(j *wire.Job) { j.Tenant, j.User, j.Group = "globex", "globex", "globex" })
		rep, err := m.Apply(context.Background(), []wire.Job{job(idA), job(idB), other})
		if err != nil {
			t.Fatal(err)
		}
		acme, globex := job(idA).LockDir(), other.LockDir()
		want := map[string]int{acme: 1, globex: 1}
		if !reflect.DeepEqual(checked, want) || !reflect.DeepEqual(made, want) {
			t.Errorf("fail=%v: lock dirs checked %v, created %v; want each once: %v", fail, checked, made, want)
		}
		if wantFailed := map[bool]int{false: 0, true: 3}[fail]; len(rep.Failed) != wantFailed {
			t.Errorf("fail=%v: %d jobs failed, want %d: %v", fail, len(rep.Failed), wantFailed, rep.Failed)
		}
	}
}

// A command-only edit rewrites the spec and nothing else reaches systemd.
func TestApplyCommandEditTouchesOnlySpec(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	before := len(f.Calls())
	rep, err := m.Apply(ctx, []wire.Job{job(idA, version(2), func(j *wire.Job) { j.Command = "echo new" })})
	if err != nil {
		t.Fatal(err)
	}
	if calls := f.Calls()[before:]; len(calls) != 0 {
		t.Errorf("systemd calls for a command edit: %q", calls)
	}
	if len(rep.Specs) != 1 || len(rep.Written) != 0 || rep.Reloads != 0 {
		t.Errorf("report %+v", rep)
	}
}

// On a disk that cannot be written, a disable still stops and disables the
// timer, and the job is reported failed.
func TestApplyFailingWriteStillStopsDisabledTimer(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	// The spec dir becomes unwritable: a regular file where the directory was.
	if err := os.RemoveAll(m.layout.Paths.SpecDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.layout.Paths.SpecDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	before := len(f.Calls())
	rep, err := m.Apply(ctx, []wire.Job{job(idA, version(2), disabled)})
	if err != nil {
		t.Fatal(err)
	}
	timer := job(idA).UnitName() + ".timer"
	if got, want := f.Calls()[before:], []string{"stop " + timer, "disable " + timer}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0], job(idA).UnitName()) || len(rep.Disabled) != 1 {
		t.Errorf("report %+v", rep)
	}
}

// A reload that fails leaves the dirty marker; the next plan reloads even
// though every file is as wanted, and that reload clears the marker.
func TestCrashBeforeReloadIsRepaired(t *testing.T) {
	m, f := testManager(t)
	f.hold(job(idA))
	ctx := context.Background()
	f.failRload = errors.New("connection reset")
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err == nil {
		t.Fatal("apply with a failing reload succeeded")
	}
	if _, err := os.Stat(m.layout.Marker()); err != nil {
		t.Fatalf("no dirty marker after a failed reload: %v", err)
	}
	f.failRload = nil
	// An old temp file of an interrupted write lies beside the units.
	tmp := filepath.Join(m.layout.UnitDir, ".tmp-"+job(idA).UnitName()+".timer-42")
	if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, testNow.Add(-time.Hour), testNow.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	p, err := m.Plan(ctx, Request{Op: OpReconcile, Jobs: []wire.Job{job(idA)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(p); !reflect.DeepEqual(got, []string{"cleanup .tmp-" + idA + ".timer-42", "reload", "start " + idA + ".timer"}) {
		t.Errorf("plan %q", got)
	}
	rep, err := m.ReconcileExactly(ctx, []wire.Job{job(idA)})
	if err != nil || rep.Reloads != 1 {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	if _, err := os.Stat(m.layout.Marker()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker still there after the repairing reload: %v", err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp file still there: %v", err)
	}
}

func TestRemoveStopsDisablesDeletesAndReloads(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA), job(idB)}); err != nil {
		t.Fatal(err)
	}
	before := len(f.Calls())
	rep, err := m.Remove(ctx, []string{job(idA).UnitName()})
	if err != nil {
		t.Fatal(err)
	}
	timer := job(idA).UnitName() + ".timer"
	if got, want := f.Calls()[before:], []string{"stop " + timer, "disable " + timer, "reload"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	// The removed timer's disable is part of the removal, not a disable.
	if !reflect.DeepEqual(rep.Removed, []string{job(idA).UnitName()}) || len(rep.Disabled) != 0 || rep.Reloads != 1 {
		t.Errorf("report %+v", rep)
	}
	for _, ext := range []string{".timer", ".service"} {
		if _, err := os.Stat(m.layout.unitPath(job(idA).UnitName(), ext)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", ext, err)
		}
	}
}

// Two applies on one node never interleave: the second one's observation
// waits for the first one's apply.
func TestOneApplyAtATime(t *testing.T) {
	m, f := testManager(t)
	f.hold(job(idA))
	f.inReload = make(chan struct{})
	ctx := context.Background()
	done := make(chan error, 2)
	go func() { _, err := m.Apply(ctx, []wire.Job{job(idA)}); done <- err }()
	waitFor(t, func() bool { return len(f.Calls()) > 0 && f.Calls()[len(f.Calls())-1] == "reload" })
	go func() { _, err := m.Apply(ctx, []wire.Job{job(idA)}); done <- err }()
	time.Sleep(50 * time.Millisecond)
	n := len(f.Calls())
	close(f.inReload)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Had the second apply planned while the first was mid-way, it would
	// have seen the timer not yet started and the marker set, and issued
	// its own reload and start.
	if got := f.Calls()[n:]; !reflect.DeepEqual(got, []string{"start " + job(idA).UnitName() + ".timer"}) {
		t.Errorf("calls after the first reload: %q", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached")
}

// A loaded unit whose file changed under systemd gets a reload even when
// the file is what the job wants.
func TestApplyReloadsOnNeedDaemonReload(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, []wire.Job{job(idA)}); err != nil {
		t.Fatal(err)
	}
	f.needRload[job(idA).UnitName()+".timer"] = true
	before := len(f.Calls())
	rep, err := m.Apply(ctx, []wire.Job{job(idA)})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Calls()[before:]; !reflect.DeepEqual(got, []string{"reload"}) || rep.Reloads != 1 || rep.Changed() {
		t.Errorf("calls %q report %+v", got, rep)
	}
}

// Issue 12 (h): a call whose context ends while another holds the node's
// unit lock gives up without touching anything, so an activity past its
// deadline frees its worker slot instead of waiting and then applying a
// plan nobody waits for.
func TestCallGivesUpWaitingForTheLock(t *testing.T) {
	m, f := testManager(t)
	f.hold(job(idA))
	f.inReload = make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := m.Apply(context.Background(), []wire.Job{job(idA)})
		first <- err
	}()
	for !slices.Contains(f.Calls(), "reload") { // the first call holds the lock
		time.Sleep(time.Millisecond)
	}
	before := len(f.Calls())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	for name, call := range map[string]func() error{
		"apply":  func() error { _, err := m.Apply(ctx, []wire.Job{job(idB)}); return err },
		"delete": func() error { _, err := m.Delete(ctx, []string{job(idA).UnitName()}, 3); return err },
		"plan":   func() error { _, err := m.Plan(ctx, Request{Op: OpApply, Jobs: []wire.Job{job(idB)}}); return err },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s while the lock is held: %v, want the context's deadline", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s still waits for the lock 5 s after its context ended", name)
		}
	}
	if got := f.Calls()[before:]; len(got) > 0 {
		t.Errorf("calls that gave up still acted: %v", got)
	}
	close(f.inReload)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The lock is free again.
	if _, err := m.Apply(context.Background(), []wire.Job{job(idB)}); err != nil {
		t.Fatal(err)
	}
}

// Enabling makes the link systemctl enable makes, replaces a wrong one
// in its place and leaves a right one alone.
func TestEnableLinks(t *testing.T) {
	m, _ := testManager(t)
	e := executor{layout: m.layout, log: m.log}
	wants := filepath.Join(m.layout.UnitDir, "timers.target.wants")
	if err := os.Symlink("/elsewhere/b.timer", filepath.Join(wants, "b.timer")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(m.layout.UnitDir, "c.timer"), filepath.Join(wants, "c.timer")); err != nil {
		t.Fatal(err)
	}
	if err := e.enableLinks([]string{"a.timer", "b.timer", "c.timer"}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(wants)
	if len(entries) != 3 {
		t.Errorf("%d entries in timers.target.wants, want 3 (no temp link left)", len(entries))
	}
	for _, n := range []string{"a.timer", "b.timer", "c.timer"} {
		if got, err := os.Readlink(filepath.Join(wants, n)); err != nil || got != filepath.Join(m.layout.UnitDir, n) {
			t.Errorf("%s links to %q (%v)", n, got, err)
		}
	}
}

// A plan without a reload writes only units systemd did not hold when it
// observed the node; if something loads one of them from its old file
// before the write (a run-now does not wait for the manager's lock), the
// plan reloads before its starts, or systemd would keep the old
// definition until some unrelated reload. Nothing loaded meanwhile: no
// reload.
func TestNoReloadPlanReloadsForAUnitLoadedMeanwhile(t *testing.T) {
	for _, loadedMeanwhile := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing_loaded", true: "loaded_meanwhile"}[loadedMeanwhile], func(t *testing.T) {
			m, f := testManager(t)
			old := afterIO
			t.Cleanup(func() { afterIO = old })
			afterIO = func(what string) {
				if loadedMeanwhile && what == "sync" {
					f.hold(job(idA)) // a run-now loads the service from the old file
				}
			}
			rep, err := m.Apply(context.Background(), []wire.Job{job(idA)})
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			if loadedMeanwhile {
				want = 1
			}
			if rep.Reloads != want {
				t.Fatalf("reloads %d, want %d (calls %q)", rep.Reloads, want, f.Calls())
			}
			if calls := f.Calls(); len(calls) == 0 || (loadedMeanwhile && calls[0] != "reload") {
				t.Errorf("calls %q: the reload must come before the start", calls)
			}
		})
	}
}
