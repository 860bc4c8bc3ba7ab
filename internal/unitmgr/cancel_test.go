package unitmgr

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
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
}

func (f *cancelSystemd) UnitProperty(_ context.Context, unit, _, name string) (any, error) {
	switch name {
	case "ActiveState":
		return f.state, nil
	case "InvocationID":
		return f.invocation, nil
	}
	return f.fakeSystemd.UnitProperty(context.Background(), unit, "", name)
}

const recordOwner = 4242 // a tenant uid: the record must be the unit user's

// cancelNode is a manager whose job idA has its service file and, when
// running is not "", a run record naming that run key.
func cancelNode(t *testing.T, state, running string) (*Manager, *cancelSystemd, string) {
	t.Helper()
	m, base := testManager(t)
	f := &cancelSystemd{fakeSystemd: base, state: state, invocation: []byte{0xab, 0xcd, 0x01}}
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
		if err := runner.WriteRecord(rt, runner.Record{Kind: runner.KindRan, RunKey: running}); err != nil {
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
			got, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: unit, RunKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("stopped = %v, want %v", got, tc.want)
			}
			var wantCalls []string
			if tc.want {
				wantCalls = []string{"stop " + unit + ".service"}
			}
			if calls := f.Calls(); !reflect.DeepEqual(calls, wantCalls) {
				t.Fatalf("systemd calls %q, want %q", calls, wantCalls)
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

// A unit that is not on this node is none of its business.
func TestCancelRunOfAUnitNotHere(t *testing.T) {
	m, f, _ := cancelNode(t, "activating", "")
	ok, err := m.CancelRun(context.Background(), wire.CancelRequest{Unit: job(idB).UnitName(), RunKey: runkey.Manual(idB, "7")})
	if err != nil || ok || len(f.Calls()) != 0 {
		t.Fatalf("stopped=%v err=%v calls=%q, want nothing", ok, err, f.Calls())
	}
}
