package workflows

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// fakeStore answers the core activities from fields.
type fakeStore struct {
	CoreStore // methods a test does not set panic
	set       wire.DesiredSet
	known     bool
	err       error
}

func (f fakeStore) NodeDesiredJobs(context.Context, string) (wire.DesiredSet, bool, error) {
	return f.set, f.known, f.err
}

// fakeUnits records what the node activities asked of the unit manager.
type fakeUnits struct {
	NodeUnits
	rep        wire.NodeReport
	err        error
	snap       wire.Snapshot
	deletedAt  int64
	applied    []wire.Job
	reconciled bool
	desired    []wire.Job // the set Reconcile got
	pages      wire.PageSnapshots
	removed    bool
	ranNow     bool
}

func (f *fakeUnits) Apply(_ context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	f.applied = jobs
	return f.rep, f.err
}

func (f *fakeUnits) Reconcile(_ context.Context, set wire.DesiredSet) (wire.NodeReport, error) {
	f.snap, f.reconciled, f.desired, f.pages = set.Snapshot, true, set.Jobs, set.Pages
	return f.rep, f.err
}

func (f *fakeUnits) Delete(_ context.Context, _ []string, version int64) (wire.NodeReport, error) {
	f.deletedAt, f.removed = version, true
	return f.rep, f.err
}

func (f *fakeUnits) RunNow(context.Context, wire.RunNowRequest) error {
	f.ranNow = true
	return f.err
}

// retry is how Temporal will treat an activity's error.
type retry int

const (
	noError retry = iota
	retried
	final
)

func classify(err error) retry {
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return noError
	case errors.As(err, &app) && app.NonRetryable():
		return final
	default:
		return retried
	}
}

func TestDesiredSetForNodeRetriesOnlyWhatMayHeal(t *testing.T) {
	set := wire.DesiredSet{Jobs: []wire.Job{{ID: "a", Tenant: "acme"}}, Snapshot: wire.Snapshot{Xmin: 10, Xmax: 12}}
	for _, tc := range []struct {
		name  string
		store fakeStore
		want  retry
		jobs  int
	}{
		{"known node", fakeStore{set: set, known: true}, noError, 1},
		{"known node, empty shard", fakeStore{known: true}, noError, 0},
		{"unknown node", fakeStore{}, final, 0},
		{"database down", fakeStore{err: errors.New("connection refused")}, retried, 0},
		{"revisions ahead of the counter (a logical restore)", fakeStore{err: fmt.Errorf("job a: %w", wire.ErrRevisionsAhead)}, final, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&CoreActivities{Store: tc.store}).DesiredSetForNode(context.Background(), "n1")
			if c := classify(err); c != tc.want {
				t.Errorf("error %v: class %d, want %d", err, c, tc.want)
			}
			if len(got.Jobs) != tc.jobs {
				t.Errorf("%d jobs, want %d", len(got.Jobs), tc.jobs)
			}
			if tc.jobs > 0 && got.Snapshot.Xmin != 10 {
				t.Errorf("snapshot %+v not passed on", got.Snapshot)
			}
		})
	}
}

func TestApplyJobsFailsFinallyOnABadJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		units fakeUnits
		want  retry
	}{
		{"applied", fakeUnits{rep: wire.NodeReport{Written: []string{"cron-acme-a.timer"}}}, noError},
		{"a job rejected", fakeUnits{rep: wire.NodeReport{Failed: []string{"a: bad schedule"}}}, final},
		{"systemd unreachable", fakeUnits{err: errors.New("dbus: connection closed")}, retried},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&NodeActivities{Units: &tc.units, Admission: admitAll}).ApplyJobs(context.Background(), []wire.Job{tenantJob})
			if c := classify(err); c != tc.want {
				t.Errorf("error %v: class %d, want %d", err, c, tc.want)
			}
		})
	}
}

// tenantJob is a job the node admits under admitAll.
var tenantJob = wire.Job{ID: "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10", Tenant: "acme", User: "acme", Group: "acme",
	Webroot: "/srv/shared/www/acme/public", WebStorageDir: "/srv/shared/www"}

// admitAll is a node policy whose every account is a tenant's (uid 2001).
var admitAll = trust.Policy{StorageDir: "/srv/shared/www",
	LookupUID: func(string) (uint32, error) { return 2001, nil }, LookupGID: func(string) (uint32, error) { return 2001, nil },
	LookupGroups: func(u string) ([]string, error) { return []string{u}, nil }}

// A task the node's policy refuses never reaches the unit manager, whatever
// else the batch holds; RemoveUnits, Reconcile and RunNow refuse names the
// node would not have rendered.
func TestNodeTasksPassAdmission(t *testing.T) {
	root := tenantJob
	root.ID, root.User = "1b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10", "root"
	u := &fakeUnits{}
	a := &NodeActivities{Units: u, Admission: admitAll}
	rep, err := a.ApplyJobs(context.Background(), []wire.Job{tenantJob, root})
	if classify(err) != final || len(rep.Failed) != 1 {
		t.Errorf("apply with a root job: %v, failed %v; want a final error naming it", err, rep.Failed)
	}
	if len(u.applied) != 1 || u.applied[0].ID != tenantJob.ID {
		t.Errorf("unit manager got %+v, want only the tenant's job", u.applied)
	}
	if _, err := a.Reconcile(context.Background(), []wire.Job{tenantJob, root}, wire.Snapshot{}); classify(err) != final || u.reconciled {
		t.Errorf("reconcile with a root job: %v (reconciled %v), want refused before the unit manager", err, u.reconciled)
	}
	if _, err := a.RemoveUnits(context.Background(), []string{"../../etc/passwd"}, 3); classify(err) != final || u.removed {
		t.Errorf("remove of a foreign name: %v, want refused", err)
	}
	if err := a.RunNow(context.Background(), wire.RunNowRequest{Unit: "sshd", Request: "1"}); classify(err) != final || u.ranNow {
		t.Errorf("run-now of a foreign unit: %v, want refused", err)
	}
}

// The snapshot of a converge and the version of a delete reach the unit
// manager: orphans and tombstones are decided by them.
func TestNodeTasksPassSnapshotAndDeleteVersion(t *testing.T) {
	u := &fakeUnits{}
	a := &NodeActivities{Units: u, Admission: admitAll}
	snap := wire.Snapshot{Xmin: 100, Xmax: 105, Xip: []uint64{102}}
	if _, err := a.Reconcile(context.Background(), nil, snap); err != nil {
		t.Fatal(err)
	}
	if u.snap.Xmin != 100 || u.snap.Xmax != 105 || len(u.snap.Xip) != 1 {
		t.Errorf("reconcile got snapshot %+v, want %+v", u.snap, snap)
	}
	if _, err := a.RemoveUnits(context.Background(), []string{tenantJob.UnitName()}, 9); err != nil {
		t.Fatal(err)
	}
	if u.deletedAt != 9 {
		t.Errorf("delete got version %d, want 9", u.deletedAt)
	}
}

// A request no start on the node took in time goes to the next node, not
// to this one again (a retry would write it anew and wait again); so does
// one the node cannot serve at all (the unit is not on it, its spec is
// unreadable); any other failure is retried (a bounded number of times).
func TestRunNowNotTakenIsFinalOnTheNode(t *testing.T) {
	unit := "cron-acme-" + tenantJob.ID
	for _, tt := range []struct {
		err  error
		want retry
	}{
		{nil, noError},
		{fmt.Errorf("%w: behind a run", wire.ErrRunNowNotTaken), final},
		{errors.New("D-Bus gone"), retried},
		{fmt.Errorf("%w: cron-acme-x is not on this node", wire.ErrRunNowNotHere), final},
	} {
		a := &NodeActivities{Units: &fakeUnits{err: tt.err}, Admission: admitAll}
		if got := classify(a.RunNow(context.Background(), wire.RunNowRequest{Unit: unit, Request: "1"})); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.err, got, tt.want)
		}
	}
}

// fakeSource answers a node's desired set read from fields.
type fakeSource struct {
	set    wire.DesiredSet
	err    error
	asked  string
	called int
}

func (f *fakeSource) DesiredSet(_ context.Context, nodeID string) (wire.DesiredSet, error) {
	f.asked, f.called = nodeID, f.called+1
	return f.set, f.err
}

// A paged converge reads the node's set for the node the reference names,
// and reconciles once to all of it with its snapshot, through admission
// like Reconcile; what the read says will not change fails for good,
// the rest is retried.
func TestReconcileFromCore(t *testing.T) {
	root := tenantJob
	root.ID, root.User = "1b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10", "root"
	other := tenantJob
	other.ID = "2b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	snap := wire.Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{101}}
	for _, tc := range []struct {
		name       string
		source     *fakeSource
		want       retry
		reconciled int // jobs the unit manager got; -1: not called
	}{
		{"the whole set, once", &fakeSource{set: wire.DesiredSet{Jobs: []wire.Job{tenantJob, other}, Snapshot: snap}}, noError, 2},
		{"an empty shard", &fakeSource{set: wire.DesiredSet{Snapshot: snap}}, noError, 0},
		{"a job admission refuses", &fakeSource{set: wire.DesiredSet{Jobs: []wire.Job{tenantJob, root}, Snapshot: snap}}, final, -1},
		{"core unreachable", &fakeSource{err: errors.New("connection refused")}, retried, -1},
		{"another node's set", &fakeSource{err: fmt.Errorf("page 1: %w", desiredset.ErrRefused)}, final, -1},
		{"revisions ahead", &fakeSource{err: fmt.Errorf("page 1: %w", wire.ErrRevisionsAhead)}, final, -1},
		{"no core API", nil, final, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &fakeUnits{rep: wire.NodeReport{Written: []string{"x.timer"}}}
			a := &NodeActivities{Units: u, Admission: admitAll}
			if tc.source != nil {
				a.Desired = tc.source
			}
			rep, err := a.ReconcileFromCore(context.Background(), wire.DesiredSetRef{NodeID: "n1"})
			if c := classify(err); c != tc.want {
				t.Errorf("error %v: class %d, want %d", err, c, tc.want)
			}
			if tc.source != nil && (tc.source.asked != "n1" || tc.source.called != 1) {
				t.Errorf("read the set of %q %d times, want n1's once", tc.source.asked, tc.source.called)
			}
			if tc.reconciled < 0 {
				if u.reconciled {
					t.Error("the unit manager reconciled")
				}
				return
			}
			if !u.reconciled || len(u.desired) != tc.reconciled || u.snap.Xmin != 100 || len(u.snap.Xip) != 1 {
				t.Errorf("unit manager got %d jobs, snapshot %+v; want %d with %+v", len(u.desired), u.snap, tc.reconciled, snap)
			}
			if rep.Desired != tc.reconciled || len(rep.Written) != 1 {
				t.Errorf("report %+v, want desired %d and the unit manager's report", rep, tc.reconciled)
			}
		})
	}
}

// The report of a paged converge is a payload: however many units the
// node wrote, it holds at most wire.MaxReportNames names a list.
func TestReconcileFromCoreBoundsItsReport(t *testing.T) {
	written := make([]string, 3*wire.MaxReportNames)
	for i := range written {
		written[i] = fmt.Sprintf("cron-acme-%d.timer", i)
	}
	u := &fakeUnits{rep: wire.NodeReport{Written: written, Reloads: 1}}
	a := &NodeActivities{Units: u, Admission: admitAll, Desired: &fakeSource{set: wire.DesiredSet{Jobs: []wire.Job{tenantJob}}}}
	rep, err := a.ReconcileFromCore(context.Background(), wire.DesiredSetRef{NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Written) != wire.MaxReportNames || rep.Omitted != 2*wire.MaxReportNames || rep.Reloads != 1 {
		t.Errorf("report of %d written names, %d omitted, %d reloads; want %d, %d, 1",
			len(rep.Written), rep.Omitted, rep.Reloads, wire.MaxReportNames, 2*wire.MaxReportNames)
	}
}

// A paged converge on a node with trust keys reconciles only pages the
// core signed for this node's very requests: a tampered page, a page
// signed for another node or an unsigned one fails the attempt (retried,
// as a payload the codec refuses) and nothing reaches the unit manager,
// not even the pages that did verify.
func TestReconcileFromCoreVerifiesPages(t *testing.T) {
	const node = "00000000-0000-4000-8000-0000000000aa"
	_, core, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := core.Public().(ed25519.PublicKey)
	second := tenantJob
	second.ID = "2b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	pageBody := func(p wire.DesiredPage) []byte {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		// serve answers the request for the page after the cursor: the
		// body and what it is signed for ("" node: unsigned).
		serve func(req trust.PageRequest, body []byte) (out []byte, signedFor trust.PageRequest)
		want  retry
	}{
		{"signed pages", func(req trust.PageRequest, body []byte) ([]byte, trust.PageRequest) { return body, req }, noError},
		{"second page emptied in transit", func(req trust.PageRequest, body []byte) ([]byte, trust.PageRequest) {
			if req.After != "" {
				return []byte(`{"jobs":[],"snapshot":{"xmin":100,"xmax":104}}`), req
			}
			return body, req
		}, retried},
		{"a page signed for another node", func(req trust.PageRequest, body []byte) ([]byte, trust.PageRequest) {
			req.Node = "00000000-0000-4000-8000-0000000000bb"
			return body, req
		}, retried},
		{"unsigned second page", func(req trust.PageRequest, body []byte) ([]byte, trust.PageRequest) {
			if req.After != "" {
				return body, trust.PageRequest{}
			}
			return body, req
		}, retried},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
				req := trust.PageRequest{Node: node, After: r.URL.Query().Get("after"), Limit: limit}
				page := wire.DesiredPage{Jobs: []wire.Job{tenantJob}, Snapshot: wire.Snapshot{Xmin: 100, Xmax: 104}, Next: tenantJob.ID}
				if req.After != "" {
					page = wire.DesiredPage{Jobs: []wire.Job{second}, Snapshot: wire.Snapshot{Xmin: 100, Xmax: 104}}
				}
				body, signedFor := tc.serve(req, pageBody(page))
				if signedFor.Node != "" {
					w.Header().Set(trust.PageSignatureHeader, trust.SignPage(core, signedFor, pageBody(page), time.Now()))
				}
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			u := &fakeUnits{}
			a := &NodeActivities{Units: u, Admission: admitAll, Desired: desiredset.Client{BaseURL: srv.URL, PageSize: 1,
				Pages: &trust.PageVerifier{Core: map[string]ed25519.PublicKey{trust.KeyID(pub): pub}, MaxAge: 10 * time.Minute},
				Log:   slog.New(slog.NewTextHandler(io.Discard, nil))}}
			_, err := a.ReconcileFromCore(context.Background(), wire.DesiredSetRef{NodeID: node})
			if c := classify(err); c != tc.want {
				t.Fatalf("error %v: class %d, want %d", err, c, tc.want)
			}
			if tc.want != noError {
				if u.reconciled {
					t.Errorf("the unit manager reconciled %d jobs from a refused read", len(u.desired))
				}
				return
			}
			if !u.reconciled || len(u.desired) != 2 {
				t.Errorf("unit manager got %d jobs (reconciled %v), want both", len(u.desired), u.reconciled)
			}
			// Each page's range and snapshot reach the unit manager, which
			// judges an orphan by the page that found it gone.
			if len(u.pages) != 2 || u.pages[0].Last != tenantJob.ID || u.pages[1].Last != "" || u.pages[1].Snapshot.Xmax != 104 {
				t.Errorf("unit manager got pages %+v, want the two pages' ranges and snapshots", u.pages)
			}
		})
	}
}

// digestSource is a fakeSource that also answers the set's digest.
type digestSource struct {
	fakeSource
	digest  wire.DesiredDigest
	err     error
	digests int
}

func (d *digestSource) Digest(_ context.Context, nodeID string) (wire.DesiredDigest, error) {
	d.digests++
	return d.digest, d.err
}

// fastUnits is a fakeUnits that is a FastConverger.
type fastUnits struct {
	fakeUnits
	unchanged bool
	err       error
	asked     []wire.DesiredDigest
}

func (f *fastUnits) ReconcileUnchanged(ctx context.Context, digest func(context.Context) (wire.DesiredDigest, error)) (bool, string, error) {
	d, err := digest(ctx)
	if err != nil {
		return false, "", fmt.Errorf("desired set digest: %w", err)
	}
	f.asked = append(f.asked, d)
	return f.unchanged, "test", f.err
}

// The converge fast path: the core's digest first; the unit manager's
// yes ends the converge without reading the set; anything else (its no,
// its error, no digest) converges in full; revisions ahead fail for good
// as the full read would.
func TestReconcileFromCoreFastPath(t *testing.T) {
	d := wire.DesiredDigest{Digest: wire.SetDigest([]wire.Job{tenantJob}), Jobs: 1}
	set := wire.DesiredSet{Jobs: []wire.Job{tenantJob}, Snapshot: wire.Snapshot{Xmin: 100, Xmax: 100}}
	for _, tc := range []struct {
		name      string
		digestErr error
		unchanged bool
		unitsErr  error
		want      retry
		full      bool // the set was read and reconciled
	}{
		{"unchanged", nil, true, nil, noError, false},
		{"changed", nil, false, nil, noError, true},
		{"node state unreadable", nil, true, errors.New("list units: bus gone"), noError, true},
		{"an older core (404)", errors.New("core API answered 404"), true, nil, noError, true},
		{"revisions ahead", fmt.Errorf("digest: %w", wire.ErrRevisionsAhead), true, nil, final, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &digestSource{fakeSource: fakeSource{set: set}, digest: d, err: tc.digestErr}
			u := &fastUnits{fakeUnits: fakeUnits{rep: wire.NodeReport{Written: []string{"x.timer"}}}, unchanged: tc.unchanged, err: tc.unitsErr}
			a := &NodeActivities{Units: u, Admission: admitAll, Desired: src}
			rep, err := a.ReconcileFromCore(context.Background(), wire.DesiredSetRef{NodeID: "n1"})
			if c := classify(err); c != tc.want {
				t.Fatalf("error %v: class %d, want %d", err, c, tc.want)
			}
			if src.digests != 1 {
				t.Errorf("asked the digest %d times, want once", src.digests)
			}
			if read := src.called == 1 && u.reconciled; read != tc.full {
				t.Errorf("read the set %d times, reconciled %v; want a full converge %v", src.called, u.reconciled, tc.full)
			}
			if tc.want == noError && !tc.full && (rep.Desired != 1 || len(rep.Written) != 0) {
				t.Errorf("fast report %+v, want the set's size and nothing done", rep)
			}
			if tc.digestErr == nil && tc.want == noError && (len(u.asked) != 1 || u.asked[0] != d) {
				t.Errorf("unit manager asked %+v, want the core's digest", u.asked)
			}
		})
	}
}

// TestAfterConvergeRunsOncePerConverge: the daemon's hook after a converge
// read from the core runs once for each, whether it took the fast path,
// converged in full or failed, and not for other activities.
func TestAfterConvergeRunsOncePerConverge(t *testing.T) {
	d := wire.DesiredDigest{Digest: wire.SetDigest([]wire.Job{tenantJob}), Jobs: 1}
	set := wire.DesiredSet{Jobs: []wire.Job{tenantJob}, Snapshot: wire.Snapshot{Xmin: 100, Xmax: 100}}
	for _, tc := range []struct {
		name      string
		unchanged bool
		readErr   error
	}{
		{"fast path", true, nil},
		{"full", false, nil},
		{"failed: core unreachable", false, errors.New("connection refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &digestSource{fakeSource: fakeSource{set: set, err: tc.readErr}, digest: d}
			u := &fastUnits{fakeUnits: fakeUnits{}, unchanged: tc.unchanged}
			ran := make(chan struct{}, 10)
			release := make(chan struct{})
			defer close(release)
			// The hook blocks until the test ends: the converge must answer
			// without waiting for it.
			a := &NodeActivities{Units: u, Admission: admitAll, Desired: src, AfterConverge: func() { ran <- struct{}{}; <-release }}
			if _, err := a.ApplyJobs(context.Background(), []wire.Job{tenantJob}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ran:
				t.Fatal("AfterConverge ran after ApplyJobs, not a converge")
			case <-time.After(50 * time.Millisecond):
			}
			answered := make(chan struct{})
			go func() {
				_, _ = a.ReconcileFromCore(context.Background(), wire.DesiredSetRef{NodeID: "n1"})
				close(answered)
			}()
			select {
			case <-answered:
			case <-time.After(5 * time.Second):
				t.Fatal("the converge waited for AfterConverge")
			}
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatal("AfterConverge did not run")
			}
			if full := !tc.unchanged && tc.readErr == nil; u.reconciled != full {
				t.Fatalf("reconciled %v, want %v: the case did not take its path", u.reconciled, full)
			}
			select {
			case <-ran:
				t.Fatal("AfterConverge ran twice")
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}
