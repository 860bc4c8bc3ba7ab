package unitmgr

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// cancelSystemd is the fake systemd with a service's state and invocation.
type cancelSystemd struct {
	*fakeSystemd
	state      string
	invocation []byte
	mainPID    uint32
	// onRead, when set, runs on each read of InvocationID (the n-th): a
	// test moves the activation on between the agent's looks.
	onRead func(n int)
	reads  int
}

func (f *cancelSystemd) UnitProperty(_ context.Context, unit, _, name string) (any, error) {
	switch name {
	case "ActiveState":
		return f.state, nil
	case "InvocationID":
		f.reads++
		if f.onRead != nil {
			f.onRead(f.reads)
		}
		return f.invocation, nil
	case "MainPID":
		return f.mainPID, nil
	}
	return f.fakeSystemd.UnitProperty(context.Background(), unit, "", name)
}

// runner starts a stand-in for the unit's runner (a sleep) and returns
// its pid and a channel that says how it ended.
func runnerProcess(t *testing.T) (uint32, <-chan string) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 1)
	go func() {
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ended <- ws.Signal().String()
			return
		}
		ended <- fmt.Sprint(err)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return uint32(cmd.Process.Pid), ended
}

const recordOwner = 4242 // a tenant uid: the record must be the unit user's

// cancelNode is a manager whose job idA has its service file and, when
// running is not "", a run record naming that run key.
func cancelNode(t *testing.T, state, running string) (*Manager, *cancelSystemd, string) {
	return cancelNodeKind(t, state, running, runner.KindRan)
}

// cancelNodeKind is cancelNode with a record of kind.
func cancelNodeKind(t *testing.T, state, running, kind string) (*Manager, *cancelSystemd, string) {
	t.Helper()
	m, base := testManager(t)
	pid, _ := runnerProcess(t)
	f := &cancelSystemd{fakeSystemd: base, state: state, invocation: []byte{0xab, 0xcd, 0x01}, mainPID: pid}
	m.sys = f
	dir := t.TempDir()
	m.cancel = cancelPaths{runtimeRoot: filepath.Join(dir, "run"), markerDir: filepath.Join(dir, "cancel")}
	m.runNow.owner = func(string) (int, error) { return recordOwner, nil }
	unit := job(idA).UnitName()
	if err := os.MkdirAll(m.layout.UnitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.layout.UnitDir, unit+".service"), []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if running != "" {
		rt := filepath.Join(m.cancel.runtimeRoot, unit)
		if err := os.MkdirAll(rt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := runner.WriteRecord(rt, runner.Record{Kind: kind, RunKey: running}); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(rt, runner.RecordFile), recordOwner, recordOwner); err != nil {
			t.Skipf("cannot give the record to a tenant uid (not root): %v", err)
		}
	}
	return m, f, unit
}

func TestCancelRunStopsOnlyTheNamedRunningRun(t *testing.T) {
	slot := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	key := runkey.Scheduled(idA, slot)
	other := runkey.Scheduled(idA, slot.Add(time.Minute))
	for _, tc := range []struct {
		name    string
		state   string
		running string
		want    bool
	}{
		{"running the named run", "activating", key, true},
		{"running the next slot", "activating", other, false},
		{"not running", "inactive", key, false},
		{"between runs (no record)", "activating", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, f, unit := cancelNode(t, tc.state, tc.running)
			pid, ended := runnerProcess(t)
			f.mainPID = pid
			got, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: unit, RunKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("stopped = %v, want %v", got, tc.want)
			}
			select {
			case how := <-ended:
				if !tc.want || how != "terminated" {
					t.Fatalf("the runner ended (%s), want it signalled only when the run is the named one (%v), with SIGTERM", how, tc.want)
				}
			case <-time.After(2 * time.Second):
				if tc.want {
					t.Fatal("the runner was not signalled")
				}
			}
			if calls := f.Calls(); len(calls) != 0 {
				t.Fatalf("systemd calls %q: a cancel signals the runner, it stops no unit", calls)
			}
			b, err := os.ReadFile(filepath.Join(m.cancel.markerDir, unit+".json"))
			if !tc.want {
				if err == nil {
					t.Fatalf("a marker was left though nothing was stopped: %s", b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var mk wire.CancelMarker
			if err := json.Unmarshal(b, &mk); err != nil {
				t.Fatal(err)
			}
			if mk.RunKey != key || mk.InvocationID != "abcd01" {
				t.Fatalf("marker %+v: want run %s and the service's invocation abcd01", mk, key)
			}
			st, err := os.Stat(filepath.Join(m.cancel.markerDir, unit+".json"))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("marker mode %v (%v): want 0600, root's only", st.Mode(), err)
			}
		})
	}
}

// A request whose run key names another job, or a unit that is not a cron
// unit, is refused before anything is read or stopped.
func TestCancelRunRefusesAMismatchedRequest(t *testing.T) {
	m, f, unit := cancelNode(t, "activating", runkey.Manual(idA, "7"))
	for _, req := range []wire.CancelRequest{
		{Unit: unit, RunKey: runkey.Manual(idB, "7")},
		{Unit: "ssh", RunKey: runkey.Manual(idA, "7")},
		{Unit: unit, RunKey: "not a key"},
	} {
		if ok, err := m.CancelRun(context.Background(), req); err == nil || ok {
			t.Errorf("%+v: stopped=%v err=%v, want refused", req, ok, err)
		}
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Fatalf("systemd calls %q, want none", calls)
	}
}

// A runner whose record names the run but is still electing (it may lose:
// another node runs the slot) or may yet switch to a run-now request is
// not signalled: only a record that says "ran" is the named run's runner.
func TestCancelRunLeavesAnElectingRunnerAlone(t *testing.T) {
	key := runkey.Scheduled(idA, time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	for _, kind := range []string{runner.KindStarted, runner.KindContention} {
		m, f, unit := cancelNodeKind(t, "activating", key, kind)
		pid, ended := runnerProcess(t)
		f.mainPID = pid
		ok, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: unit, RunKey: key})
		if err != nil || ok {
			t.Fatalf("%s: stopped=%v err=%v, want nothing done", kind, ok, err)
		}
		select {
		case how := <-ended:
			t.Fatalf("%s: the electing runner was signalled (%s)", kind, how)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// The activation moves on while the agent looks (the named run ends, the
// next starts): the agent signals nothing, leaves no marker, and the next
// run is not stopped in the named one's place.
func TestCancelRunLeavesTheNextActivationAlone(t *testing.T) {
	key := runkey.Manual(idA, "7")
	m, f, unit := cancelNode(t, "activating", key)
	pid, ended := runnerProcess(t)
	f.mainPID = pid
	f.onRead = func(n int) {
		if n == 2 { // after the record was read: the next run has begun
			f.invocation = []byte{0x99}
		}
	}
	ok, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: unit, RunKey: key})
	if err != nil || ok {
		t.Fatalf("stopped=%v err=%v, want nothing done", ok, err)
	}
	select {
	case how := <-ended:
		t.Fatalf("the next activation's runner was signalled (%s)", how)
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := os.Stat(filepath.Join(m.cancel.markerDir, unit+".json")); err == nil {
		t.Fatal("a marker was left though nothing was signalled")
	}
}

// A unit that is not on this node is none of its business.
func TestCancelRunOfAUnitNotHere(t *testing.T) {
	m, f, _ := cancelNode(t, "activating", "")
	ok, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: job(idB).UnitName(), RunKey: runkey.Manual(idB, "7")})
	if err != nil || ok || len(f.Calls()) != 0 {
		t.Fatalf("stopped=%v err=%v calls=%q, want nothing", ok, err, f.Calls())
	}
}

// Running lists the runs the node's services run, from each runner's
// record: only a record that says "ran" (an electing runner runs
// nothing), with the service's invocation.
func TestRunningListsRunsThatRan(t *testing.T) {
	key := runkey.Manual(idA, "7")
	for _, tc := range []struct {
		kind string
		want int
	}{{runner.KindRan, 1}, {runner.KindStarted, 0}, {runner.KindContention, 0}} {
		m, f, unit := cancelNodeKind(t, "activating", key, tc.kind)
		f.active[unit+".service"] = true
		rt := filepath.Join(m.cancel.runtimeRoot, unit)
		started := time.Date(2026, 11, 22, 12, 0, 1, 0, time.UTC)
		if err := runner.WriteRecord(rt, runner.Record{Kind: tc.kind, RunKey: key, Version: 3, StartedAt: &started, Trigger: string(wire.TriggerCatchUp)}); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(rt, runner.RecordFile), recordOwner, recordOwner); err != nil {
			t.Fatal(err)
		}
		got, err := m.Running(context.Background(), func(string) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.want {
			t.Fatalf("%s: %d running, want %d", tc.kind, len(got), tc.want)
		}
		if tc.want == 1 && (got[0].JobID != idA || got[0].RunKey != key || got[0].Version != 3 || !got[0].StartedAt.Equal(started) || got[0].InvocationID != "abcd01" || got[0].Trigger != wire.TriggerCatchUp) {
			t.Errorf("running %+v", got[0])
		}
	}
}

// An activation reported already is listed by its invocation alone: its
// record, which the tenant may rewrite, is not read again. A record that
// says the run finished (the service is in its ExecStopPost) is no run in
// progress.
func TestRunningSkipsKnownAndFinished(t *testing.T) {
	key := runkey.Manual(idA, "7")
	m, f, unit := cancelNode(t, "activating", key)
	f.active[unit+".service"] = true
	got, err := m.Running(context.Background(), func(inv string) bool { return inv == "abcd01" })
	if err != nil || len(got) != 1 || got[0].InvocationID != "abcd01" || got[0].RunKey != "" {
		t.Fatalf("known activation: %+v (%v), want it by invocation alone", got, err)
	}
	rt := filepath.Join(m.cancel.runtimeRoot, unit)
	started, finished := time.Now(), time.Now()
	if err := runner.WriteRecord(rt, runner.Record{Kind: runner.KindRan, RunKey: key, StartedAt: &started, FinishedAt: &finished}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(rt, runner.RecordFile), recordOwner, recordOwner); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Running(context.Background(), func(string) bool { return false }); len(got) != 0 {
		t.Fatalf("a finished run listed as running: %+v", got)
	}
}
