package unitmgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/wire"
)

// fastNode is a node whose last two converges were of set: the first
// installed it, the second planned nothing and left a stamp.
type fastNode struct {
	m      *Manager
	f      *fakeSystemd
	set    wire.DesiredSet
	digest wire.DesiredDigest
	passwd string
}

func newFastNode(t *testing.T) *fastNode {
	t.Helper()
	m, f := testManager(t)
	n := &fastNode{m: m, f: f, passwd: filepath.Join(t.TempDir(), "passwd")}
	if err := os.WriteFile(n.passwd, []byte("acme:x:1000:1000::/srv/www/acme:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.fast.inputs, m.fast.accountsInFiles = []string{n.passwd}, true // as the agent's static build
	n.set = wire.DesiredSet{Snapshot: testSnap, Jobs: []wire.Job{job(idA, rev(90)), job(idB, rev(91)), job(idC, rev(92), disabled)}}
	n.digest = wire.DesiredDigest{Digest: wire.SetDigest(n.set.Jobs), Jobs: len(n.set.Jobs)}
	rep, err := m.Reconcile(context.Background(), n.set)
	if err != nil || len(rep.Written) == 0 {
		t.Fatalf("first converge: %+v, %v", rep, err)
	}
	if _, err := os.Stat(m.layout.StampPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a converge that wrote units left a stamp (%v)", err)
	}
	if fast, why := n.fast(t); fast {
		t.Fatalf("fast after a converge with changes")
	} else if !strings.Contains(why, "no stamp") {
		t.Fatalf("why not fast: %q, want no stamp", why)
	}
	n.converge(t, true)
	return n
}

func (n *fastNode) fast(t *testing.T) (bool, string) {
	t.Helper()
	ok, why, err := n.m.ReconcileUnchanged(context.Background(), answer(n.digest))
	if err != nil {
		t.Fatalf("fast path: %v", err)
	}
	return ok, why
}

// converge runs a full converge and checks that the fast path holds after
// it (it planned nothing, so left a stamp) exactly when wantFast.
func (n *fastNode) converge(t *testing.T, wantFast bool) wire.NodeReport {
	t.Helper()
	rep, err := n.m.Reconcile(context.Background(), n.set)
	if err != nil {
		t.Fatalf("converge: %v", err)
	}
	if fast, why := n.fast(t); fast != wantFast {
		t.Fatalf("after a full converge: fast %v (%s), want %v; report %+v", fast, why, wantFast, rep)
	}
	return rep
}

func (n *fastNode) unit(id, ext string) string {
	return n.m.layout.unitPath(job(id).UnitName(), ext)
}

func TestFastPathAfterAConvergeThatPlannedNothing(t *testing.T) {
	n := newFastNode(t)
	nm := metrics.NewNode(nil)
	n.m.SetObserver(nm)
	later := testNow.Add(time.Minute)
	n.m.now = func() time.Time { return later }
	if fast, why := n.fast(t); !fast {
		t.Fatalf("not fast with nothing changed: %s", why)
	}
	if v := testutil.ToFloat64(nm.LastConverge); v != float64(later.Unix()) {
		t.Errorf("a fast converge left the converge time at %v, want %v", v, later.Unix())
	}
	other := n.digest
	other.Digest = wire.SetDigest(n.set.Jobs[:2])
	if ok, _, _ := n.m.ReconcileUnchanged(context.Background(), answer(other)); ok {
		t.Errorf("fast for another set")
	}
	other = n.digest
	other.Jobs++
	if ok, _, _ := n.m.ReconcileUnchanged(context.Background(), answer(other)); ok {
		t.Errorf("fast for a set of another size")
	}
	// The core's error is the caller's to judge (revisions ahead fail the
	// converge): returned, wrapped, never fast.
	failing := func(context.Context) (wire.DesiredDigest, error) { return wire.DesiredDigest{}, wire.ErrRevisionsAhead }
	if ok, _, err := n.m.ReconcileUnchanged(context.Background(), failing); ok || !errors.Is(err, wire.ErrRevisionsAhead) {
		t.Errorf("a failed digest: fast %v, error %v; want the core's error", ok, err)
	}
}

// Each drift from the stamped state makes the next converge run in full,
// and the full converge repairs what it must (and then stamps again).
func TestFastPathRefusesEveryDrift(t *testing.T) {
	for _, tc := range []struct {
		name   string
		drift  func(t *testing.T, n *fastNode)
		repair func(t *testing.T, n *fastNode, rep wire.NodeReport)
	}{
		{"timer edited in place", func(t *testing.T, n *fastNode) {
			editInPlace(t, n.unit(idA, extTimer))
		}, func(t *testing.T, n *fastNode, rep wire.NodeReport) {
			if !slices.Contains(rep.Written, job(idA).UnitName()+extTimer) {
				t.Errorf("the edited timer was not rewritten: %+v", rep)
			}
		}},
		{"spec removed", func(t *testing.T, n *fastNode) {
			mustRemove(t, n.m.layout.specPath(job(idB).UnitName()))
		}, func(t *testing.T, n *fastNode, rep wire.NodeReport) {
			if len(rep.Specs) != 1 {
				t.Errorf("the spec was not rewritten: %+v", rep)
			}
		}},
		{"enable link removed", func(t *testing.T, n *fastNode) {
			mustRemove(t, filepath.Join(n.m.layout.UnitDir, "timers.target.wants", job(idA).UnitName()+extTimer))
		}, func(t *testing.T, n *fastNode, rep wire.NodeReport) {
			if len(rep.Enabled) != 1 {
				t.Errorf("the timer was not enabled again: %+v", rep)
			}
		}},
		{"enabled timer stopped", func(t *testing.T, n *fastNode) {
			n.f.hold(job(idA))
			if err := n.f.StopUnit(context.Background(), job(idA).UnitName()+extTimer); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, n *fastNode, _ wire.NodeReport) {
			if !n.f.active[job(idA).UnitName()+extTimer] {
				t.Errorf("the timer was not started again")
			}
		}},
		{"enabled timer stopped and collected", func(t *testing.T, n *fastNode) {
			// Not held: systemd unloads an inactive timer nothing
			// references (the review's case: enabled by a link, no reload).
			if err := n.f.StopUnit(context.Background(), job(idA).UnitName()+extTimer); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, n *fastNode, _ wire.NodeReport) {
			if !n.f.active[job(idA).UnitName()+extTimer] {
				t.Errorf("the timer was not started again")
			}
		}},
		{"disabled timer started", func(t *testing.T, n *fastNode) {
			n.f.active[job(idC).UnitName()+extTimer] = true
		}, func(t *testing.T, n *fastNode, _ wire.NodeReport) {
			if n.f.active[job(idC).UnitName()+extTimer] {
				t.Errorf("the disabled job's timer was not stopped")
			}
		}},
		{"stray unit file", func(t *testing.T, n *fastNode) {
			write(t, filepath.Join(n.m.layout.UnitDir, "cron-stray-00000000-0000-4000-8000-000000000000.timer"), "[Timer]\n")
		}, nil},
		{"dirty marker", func(t *testing.T, n *fastNode) {
			write(t, n.m.layout.Marker(), "")
		}, nil},
		{"tombstone file", func(t *testing.T, n *fastNode) {
			write(t, n.m.layout.TombstonePath(), "{}")
		}, nil},
		{"accounts changed", func(t *testing.T, n *fastNode) {
			write(t, n.passwd, "acme:x:1001:1001::/srv/www/acme:/bin/sh\n")
		}, nil},
		{"unit file touched", func(t *testing.T, n *fastNode) {
			later := time.Now().Add(time.Minute)
			if err := os.Chtimes(n.unit(idB, extService), later, later); err != nil {
				t.Fatal(err)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newFastNode(t)
			tc.drift(t, n)
			if fast, _ := n.fast(t); fast {
				t.Fatalf("fast after the drift")
			}
			rep, err := n.m.Reconcile(context.Background(), n.set)
			if err != nil {
				t.Fatalf("converge after the drift: %v", err)
			}
			if tc.repair != nil {
				tc.repair(t, n, rep)
			}
			n.converge(t, true) // the converge after the repair planned nothing: the fast path holds again
		})
	}
}

// What the fast path checks besides the fingerprint.
func TestFastPathChecksBeyondTheFingerprint(t *testing.T) {
	t.Run("disabled service running", func(t *testing.T) {
		n := newFastNode(t)
		n.f.active[job(idC).UnitName()+extService] = true
		if fast, why := n.fast(t); fast || !strings.Contains(why, "disabled") {
			t.Fatalf("fast %v (%s) while a disabled job's service runs", fast, why)
		}
	})
	t.Run("enabled service running", func(t *testing.T) {
		n := newFastNode(t)
		n.f.active[job(idA).UnitName()+extService] = true
		if fast, why := n.fast(t); !fast {
			t.Fatalf("a run of an enabled job refused the fast path: %s", why)
		}
	})
	t.Run("lock dir gone", func(t *testing.T) {
		n := newFastNode(t)
		n.m.lockDirOK = func(string, string, string) bool { return false }
		if fast, why := n.fast(t); fast || !strings.Contains(why, "lock directory") {
			t.Fatalf("fast %v (%s) without the lock directory", fast, why)
		}
	})
	t.Run("stamp too old", func(t *testing.T) {
		n := newFastNode(t)
		n.m.now = func() time.Time { return testNow.Add(FastPathMaxAge + time.Second) }
		if fast, _ := n.fast(t); fast {
			t.Fatalf("fast on a stamp older than %s", FastPathMaxAge)
		}
		n.m.now = func() time.Time { return testNow.Add(-time.Minute) }
		if fast, _ := n.fast(t); fast {
			t.Fatalf("fast on a stamp from the future (the clock went back)")
		}
	})
	t.Run("accounts through NSS", func(t *testing.T) {
		n := newFastNode(t)
		n.m.fast.accountsInFiles = false
		if fast, why := n.fast(t); fast || !strings.Contains(why, "NSS") {
			t.Fatalf("fast %v (%s) in a build that reads accounts through NSS", fast, why)
		}
	})
	t.Run("another configuration", func(t *testing.T) {
		n := newFastNode(t)
		n.m.SetFastPathKey("another config")
		if fast, _ := n.fast(t); fast {
			t.Fatalf("fast with another configuration")
		}
	})
}

// A restarted agent keeps the stamp (the benchmark's case), unless the
// file is corrupt or the agent's configuration is another.
func TestFastPathSurvivesARestart(t *testing.T) {
	n := newFastNode(t)
	restarted := func() *Manager {
		m := New(n.f, n.m.layout.UnitDir, n.m.layout.Paths, slog.New(slog.NewTextHandler(io.Discard, nil)))
		m.lockDirOK, m.now, m.fast.inputs, m.fast.accountsInFiles = n.m.lockDirOK, n.m.now, n.m.fast.inputs, true
		return m
	}
	n.m = restarted()
	if fast, why := n.fast(t); !fast {
		t.Fatalf("a restarted agent lost the stamp: %s", why)
	}
	write(t, n.m.layout.StampPath(), `{"format":1,`)
	n.m = restarted()
	if fast, _ := n.fast(t); fast {
		t.Fatalf("fast on a corrupt stamp")
	}
}

// Any apply with steps drops the stamp before its first step; a plan
// that keeps a unit (judged by the snapshot) leaves none.
func TestFastPathStampDroppedAndWithheld(t *testing.T) {
	n := newFastNode(t)
	if _, err := n.m.Apply(context.Background(), []wire.Job{job(idA, rev(95), version(2), func(j *wire.Job) { j.Command = "true" })}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.m.layout.StampPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an apply with steps left the stamp (%v)", err)
	}
	if fast, _ := n.fast(t); fast {
		t.Fatalf("fast after an apply")
	}

	// A unit the set lacks, written after the snapshot: kept, not stamped.
	k := newFastNode(t)
	if _, err := k.m.Apply(context.Background(), []wire.Job{job("3b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e74", rev(120))}); err != nil {
		t.Fatal(err)
	}
	rep := k.converge(t, false)
	if len(rep.Kept) != 1 {
		t.Fatalf("report %+v, want one kept unit", rep)
	}
	rep = k.converge(t, false) // planned nothing, but kept a unit: still no stamp
	if len(rep.Kept) != 1 {
		t.Fatalf("report %+v, want one kept unit", rep)
	}
}

// answer is a core that answers d.
func answer(d wire.DesiredDigest) func(context.Context) (wire.DesiredDigest, error) {
	return func(context.Context) (wire.DesiredDigest, error) { return d, nil }
}

func editInPlace(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x20 // another byte, the same size
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// abaSys starts a timer by hand just before the observe's listing (after
// the fingerprint's), once: the second review's case.
type abaSys struct {
	*fakeSystemd
	arm   bool
	timer string
}

func (a *abaSys) ListUnits(ctx context.Context, states, patterns []string) ([]LoadedUnit, error) {
	if a.arm && slices.Equal(patterns, listPatterns(nil)) { // the observe's listing
		a.arm = false
		a.fakeSystemd.mu.Lock()
		a.fakeSystemd.active[a.timer] = true // systemctl start by hand, in the window
		a.fakeSystemd.mu.Unlock()
	}
	return a.fakeSystemd.ListUnits(ctx, states, patterns)
}

// A timer stopped, started between the converge's file stats and its
// observation, then stopped again: systemd's state can go back (files
// cannot: ctime and inodes only move on), so the stamp holds the timers
// the plan was made from, not an earlier listing of them.
func TestFastPathStampHoldsTheTimersThePlanSaw(t *testing.T) {
	n := newFastNode(t)
	timer := job(idA).UnitName() + extTimer
	if err := n.f.StopUnit(context.Background(), timer); err != nil {
		t.Fatal(err)
	}
	n.m.sys = &abaSys{fakeSystemd: n.f, arm: true, timer: timer}
	if _, err := n.m.Reconcile(context.Background(), n.set); err != nil {
		t.Fatal(err)
	}
	if err := n.f.StopUnit(context.Background(), timer); err != nil {
		t.Fatal(err)
	}
	p, err := n.m.plan(context.Background(), Request{Op: OpReconcile, Jobs: n.set.Jobs, Snapshot: n.set.Snapshot})
	if err != nil || len(p.Steps) == 0 {
		t.Fatalf("full plan: %v %+v", err, p.Steps)
	}
	if fast, _ := n.fast(t); fast {
		t.Fatalf("fast path reports nothing to do while a full converge plans %d step(s): %s %s", len(p.Steps), p.Steps[0].Kind, p.Steps[0].Target)
	}
}
