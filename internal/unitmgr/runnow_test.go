package unitmgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestNextRunNow(t *testing.T) {
	late := wire.RunNowTTL - runNowMargin
	for _, tt := range []struct {
		name string
		obs  runNowObs
		st   runNowState
		want runNowAction
		why  string
	}{
		{"idle service: start it", runNowObs{Active: "inactive", InactiveSince: 10}, runNowState{}, runNowStart, ""},
		{"failed service: start it", runNowObs{Active: "failed", InactiveSince: 10}, runNowState{}, runNowStart, ""},
		{"a start under way: a start would merge into it", runNowObs{Active: "activating"}, runNowState{}, runNowWait, ""},
		{"its hook runs", runNowObs{Active: "deactivating"}, runNowState{Starts: 1}, runNowWait, ""},
		{"taken", runNowObs{Decided: true, Active: "activating"}, runNowState{Starts: 1}, runNowDone, ""},
		{"taken late is taken", runNowObs{Decided: true, Age: time.Hour}, runNowState{}, runNowDone, ""},
		{"own start queued, not yet run", runNowObs{Active: "inactive", InactiveSince: 10}, runNowState{Starts: 1, StartedFrom: 10}, runNowWait, ""},
		{"own start ended without taking it (merged into a timer's)", runNowObs{Active: "inactive", InactiveSince: 11}, runNowState{Starts: 1, StartedFrom: 10}, runNowStart, ""},
		{"starts used up", runNowObs{Active: "inactive", InactiveSince: 14}, runNowState{Starts: maxRunNowStarts, StartedFrom: 13}, runNowGiveUp, "started 3 times"},
		{"TTL: the run on this node still runs", runNowObs{Active: "activating", Age: late}, runNowState{}, runNowGiveUp, "still runs"},
		{"TTL: idle", runNowObs{Active: "inactive", Age: late}, runNowState{Starts: 1}, runNowGiveUp, "no start of the service took it"},
		{"just before the TTL", runNowObs{Active: "inactive", Age: late - time.Second}, runNowState{}, runNowStart, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := nextRunNow(tt.obs, tt.st)
			if got.Action != tt.want || !strings.Contains(got.Reason, tt.why) {
				t.Fatalf("%+v, want action %d, reason with %q", got, tt.want, tt.why)
			}
		})
	}
}

// fakeService is systemd for one oneshot service: a start while one is
// under way merges into it (no second run); a start runs onStart, then the
// service is inactive again.
type fakeService struct {
	mu       sync.Mutex
	active   string
	inactive uint64 // InactiveEnterTimestampMonotonic
	starts   int    // starts that ran (not merged)
	merged   int
	onStart  func()
	wg       sync.WaitGroup
}

func (f *fakeService) state(active string, ended bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active = active
	if ended {
		f.inactive++
	}
}

func (f *fakeService) StartUnit(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if busy(f.active) {
		f.merged++
		return nil
	}
	f.active, f.starts = "activating", f.starts+1
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.onStart()
		f.state("inactive", true)
	}()
	return nil
}

func (f *fakeService) UnitProperty(_ context.Context, _, _, name string) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch name {
	case "ActiveState":
		return f.active, nil
	case "InactiveEnterTimestampMonotonic":
		return f.inactive, nil
	}
	return nil, errors.New("no such property")
}

func (f *fakeService) Reload(context.Context) error                     { return nil }
func (f *fakeService) EnableUnitFiles(context.Context, []string) error  { return nil }
func (f *fakeService) DisableUnitFiles(context.Context, []string) error { return nil }
func (f *fakeService) StopUnit(context.Context, string) error           { return nil }
func (f *fakeService) StartUnits(context.Context, []string) error       { return nil }
func (f *fakeService) RestartUnit(context.Context, string) error        { return nil }
func (f *fakeService) ListUnits(_ context.Context, _, _ []string) ([]LoadedUnit, error) {
	return nil, nil
}

const runNowJob = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"

// runNowNode is one node with a job whose command appends its run key to
// {webroot}/ran, its service faked by f, and runs of the real runner.
func runNowNode(t *testing.T, f *fakeService) (*Manager, jobspec.Spec, func(byTimer bool) int) {
	t.Helper()
	dir := t.TempDir()
	unitDir, specDir, manual, rt := filepath.Join(dir, "system"), filepath.Join(dir, "jobs"), filepath.Join(dir, "manual"), filepath.Join(dir, "run")
	spec := jobspec.Spec{Tenant: "acme", ID: runNowJob, Version: 1, Schedule: "* * * * * *", Timezone: "UTC",
		Command: `echo "$HOSTCRON_RUN_KEY" >> ran`, Webroot: filepath.Join(dir, "www"), LockDir: filepath.Join(dir, ".locks")}
	for _, d := range []string{unitDir, specDir, rt, spec.Webroot, spec.LockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	unit := wire.UnitName(spec.Tenant, spec.ID)
	b, _ := spec.Marshal()
	if err := os.WriteFile(filepath.Join(specDir, unit+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unitDir, unit+".service"), []byte("[Service]\nUser="+me.Username+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	paths := units.DefaultPaths
	paths.SpecDir = specDir
	m := New(f, unitDir, paths, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.runNow = runNowHooks{dir: manual, poll: 5 * time.Millisecond}
	run := func(byTimer bool) int {
		return runner.Run(runner.Env{SpecPath: filepath.Join(specDir, unit+".json"), RuntimeDir: rt, Node: "node1", Now: time.Now,
			StampWait: 50 * time.Millisecond, ManualDir: manual, Start: runner.Start{ByTimer: byTimer},
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	f.onStart = func() { run(false) } // the agent's starts: no $TRIGGER_UNIT
	return m, spec, run
}

// A run-now request that arrives while a timer's start of the job runs on
// this node is not lost: the agent does not start into the running start
// (it would merge), waits for it to end, then starts the service, and the
// request runs, once.
func TestRunNowDuringARunIsServedAfterIt(t *testing.T) {
	f := &fakeService{active: "activating"} // a timer's start of the job is under way
	m, spec, run := runNowNode(t, f)
	unit := wire.UnitName(spec.Tenant, spec.ID)
	timerRunEnds := make(chan struct{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		run(true) // the timer's run: its slot, the request is pending meanwhile
		f.state("inactive", true)
		close(timerRunEnds)
	}()
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "99"}); err != nil {
		t.Fatal(err)
	}
	<-timerRunEnds
	f.wg.Wait()
	b, _ := os.ReadFile(filepath.Join(spec.Webroot, "ran"))
	runs := strings.Fields(string(b))
	if len(runs) != 2 || !strings.Contains(runs[0], "#scheduled#") || runs[1] != runNowJob+"#manual#99" {
		t.Fatalf("runs %q: want the timer's slot, then the request", runs)
	}
	if f.merged != 0 || f.starts != 1 {
		t.Errorf("agent started %d times, %d merged into a running start", f.starts, f.merged)
	}
	// A retried activity or a re-sent signal: taken already, no second run.
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "99"}); err != nil {
		t.Fatal(err)
	}
	f.wg.Wait()
	if b2, _ := os.ReadFile(filepath.Join(spec.Webroot, "ran")); string(b2) != string(b) {
		t.Fatalf("the request ran again: %q", b2)
	}
}

// A run of the job on this node that outlasts the request's TTL: the agent
// gives the request up here (the core hands it to another node, where the
// held lock makes it an overlap skip, reported), with an error that says
// why, and never started into the running start.
func TestRunNowGivesUpBehindALongRun(t *testing.T) {
	f := &fakeService{active: "activating"}
	m, spec, _ := runNowNode(t, f)
	var mu sync.Mutex
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(10 * time.Second); return now }
	err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: wire.UnitName(spec.Tenant, spec.ID), Request: "7"})
	if !errors.Is(err, wire.ErrRunNowNotTaken) || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("err %v: want ErrRunNowNotTaken naming the run that still runs", err)
	}
	if f.starts != 0 || f.merged != 0 {
		t.Errorf("started %d, merged %d: want no start into the running one", f.starts, f.merged)
	}
}

// A node that does not have the unit, or cannot read its spec, fails the
// request with wire.ErrRunNowNotHere, which the RunNow activity makes
// final, so the core asks the next node at once instead of retrying here.
func TestRunNowNotHere(t *testing.T) {
	f := &fakeService{active: "inactive"}
	m, spec, _ := runNowNode(t, f)
	unit := wire.UnitName(spec.Tenant, spec.ID)
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: "cron-acme-0b6f1d7c-3c8e-4a57-9e0a-000000000000", Request: "1"}); !errors.Is(err, wire.ErrRunNowNotHere) {
		t.Errorf("unit not on the node: %v", err)
	}
	if err := os.WriteFile(m.layout.specPath(unit), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "1"}); !errors.Is(err, wire.ErrRunNowNotHere) {
		t.Errorf("spec unreadable: %v", err)
	}
	if f.starts != 0 {
		t.Errorf("started %d times", f.starts)
	}
}

// A look at the shard's stamps on a hung network mount never returns. The
// agent does not wait for it (heart-beating on, hiding the hang for the
// request's whole TTL): after storageWait it gives the request up on this
// node, so the core asks the next one; the stuck read is left behind, one
// per request.
func TestRunNowOnHungStorageGivesUp(t *testing.T) {
	f := &fakeService{active: "inactive"}
	m, spec, _ := runNowNode(t, f)
	hang := make(chan struct{})
	defer close(hang)
	var calls int
	var mu sync.Mutex
	m.runNow.storageWait = 50 * time.Millisecond
	m.runNow.decided = func(string, int, string, string) (bool, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		<-hang
		return false, nil
	}
	start := time.Now()
	err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: wire.UnitName(spec.Tenant, spec.ID), Request: "3"})
	if !errors.Is(err, wire.ErrRunNowNotTaken) || !strings.Contains(err.Error(), "did not answer within 50ms") {
		t.Fatalf("err %v: want ErrRunNowNotTaken naming the hung lock dir", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("%d reads of the hung storage, want 1", calls)
	}
}

// The lock dir the agent reads is the one the unit's user owns: a unit
// without User= names no tenant, and the request is not served here.
func TestRunNowOwnerFromTheUnit(t *testing.T) {
	f := &fakeService{active: "inactive"}
	m, spec, _ := runNowNode(t, f)
	unit := wire.UnitName(spec.Tenant, spec.ID)
	var owner int = -1
	m.runNow.decided = func(_ string, uid int, _, _ string) (bool, error) { owner = uid; return true, nil }
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "4"}); err != nil || owner != os.Getuid() {
		t.Fatalf("err %v, owner %d: want the unit's user's uid %d", err, owner, os.Getuid())
	}
	if err := os.WriteFile(filepath.Join(m.layout.UnitDir, unit+".service"), []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "4"}); !errors.Is(err, wire.ErrRunNowNotHere) {
		t.Fatalf("unit without User=: %v", err)
	}
}

// A backfill request runs the past slot its key names, once: the command
// sees the key, the backfilled slot and trigger backfill, and a second
// delivery of the same request (a retried activity, another node) runs
// nothing. A key that is not a backfill of this job under this request is
// refused on the node (ErrRunNowNotHere) and runs nothing.
func TestRunNowBackfill(t *testing.T) {
	f := &fakeService{active: "inactive"}
	m, spec, _ := runNowNode(t, f)
	spec.Command = `echo "$HOSTCRON_RUN_KEY $HOSTCRON_SLOT $HOSTCRON_TRIGGER" >> ran`
	b, _ := spec.Marshal()
	unit := wire.UnitName(spec.Tenant, spec.ID)
	if err := os.WriteFile(m.layout.specPath(unit), b, 0o600); err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Add(-26 * time.Hour).Truncate(time.Minute)
	key := runkey.Backfill(runNowJob, slot, "31")
	for _, bad := range []wire.RunNowRequest{
		{Unit: unit, Request: "32", RunKey: key}, // another request's key
		{Unit: unit, Request: "31", RunKey: runkey.Backfill("0b6f1d7c-3c8e-4a57-9e0a-000000000000", slot, "31")}, // another job's
		{Unit: unit, Request: "31", RunKey: runkey.Scheduled(runNowJob, slot)},                                   // a slot's own key
	} {
		if err := m.RunNow(context.Background(), bad); !errors.Is(err, wire.ErrRunNowNotHere) {
			t.Errorf("RunNow(%+v) = %v, want ErrRunNowNotHere", bad, err)
		}
	}
	for range 2 {
		if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "31", RunKey: key}); err != nil {
			t.Fatal(err)
		}
		f.wg.Wait()
	}
	got, _ := os.ReadFile(filepath.Join(spec.Webroot, "ran"))
	want := key + " " + slot.Format(time.RFC3339) + " backfill\n"
	if string(got) != want {
		t.Fatalf("ran %q, want once %q", got, want)
	}
}

// A retry delivered twice (a redelivered task, a retried activity, the
// next node asked) runs once: every delivery carries the same request id,
// made of slot and attempt, which the shared run-now stamp holds once
// taken. The command sees trigger retry and its attempt.
func TestRunNowRetryRunsOnce(t *testing.T) {
	f := &fakeService{active: "inactive"}
	m, spec, _ := runNowNode(t, f)
	spec.Schedule = "0 0 0 * * *" // daily: the slot's next fire time is a day on
	spec.Command = `echo "$HOSTCRON_RUN_KEY $HOSTCRON_SLOT $HOSTCRON_TRIGGER $HOSTCRON_ATTEMPT" >> ran`
	b, _ := spec.Marshal()
	unit := wire.UnitName(spec.Tenant, spec.ID)
	if err := os.WriteFile(m.layout.specPath(unit), b, 0o600); err != nil {
		t.Fatal(err)
	}
	slot := time.Now().UTC().Truncate(24 * time.Hour)
	if time.Until(slot.Add(24*time.Hour)) < time.Minute {
		t.Skip("too close to the next slot, where the runner refuses the retry")
	}
	key := runkey.Retry(runNowJob, slot, 2)
	k, _ := runkey.Parse(key)
	if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "77", RunKey: key}); !errors.Is(err, wire.ErrRunNowNotHere) {
		t.Errorf("a retry under another request id: %v, want ErrRunNowNotHere", err)
	}
	for range 2 {
		if err := m.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: k.RequestID(), RunKey: key}); err != nil {
			t.Fatal(err)
		}
		f.wg.Wait()
	}
	got, _ := os.ReadFile(filepath.Join(spec.Webroot, "ran"))
	if want := key + " " + slot.Format(time.RFC3339) + " retry 2\n"; string(got) != want {
		t.Fatalf("ran %q, want once %q", got, want)
	}
}
