package unitmgr

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestSliceIDs(t *testing.T) {
	a, b, c, d := nthID(1), nthID(2), nthID(3), nthID(4)
	cases := []struct {
		name string
		ids  []string
		n    int
		want []string // bounds
	}{
		{"none: one slice", nil, 2, nil},
		{"fewer than a slice: one", []string{b, a}, 2, nil},
		{"exactly one slice: no empty second", []string{a, b}, 2, nil},
		{"two and a rest", []string{d, c, b, a}, 1, []string{a, b, c}},
		{"repeats and no-ids count once", []string{a, a, "", b, b, c}, 2, []string{b}},
	}
	for _, tc := range cases {
		if got := sliceIDs(tc.ids, tc.n); !reflect.DeepEqual(got.bounds, tc.want) {
			t.Errorf("%s: bounds %q, want %q", tc.name, got.bounds, tc.want)
		}
	}
	s := sliceIDs([]string{a, b, c, d}, 2) // (..b], (b..]
	for name, want := range map[string]int{
		job(a).UnitName(): 0, job(b).UnitName(): 0, job(c).UnitName(): 1, job(d).UnitName(): 1,
		"cron-acme-not-an-id": 1, // a name without a job id goes with the last slice
	} {
		if got := s.of(name); got != want {
			t.Errorf("slice of %s: %d, want %d", name, got, want)
		}
	}
}

func TestEndPlan(t *testing.T) {
	start := func(u string) Step { return Step{Kind: KindStart, Unit: u, Target: u + ".timer"} }
	reloads := []Step{{Kind: KindReload, Reason: "unit files changed"}, {Kind: KindReload, Reason: "unit files changed; dirty marker"}}
	p := endPlan(reloads, []Step{start("cron-a"), start("cron-b"), start("cron-c")}, map[string]bool{"cron-b": true})
	want := []string{"reload", "start cron-a.timer", "start cron-c.timer"}
	if got := summary(p); !reflect.DeepEqual(got, want) {
		t.Errorf("end plan %q, want %q", got, want)
	}
	if p.Steps[0].Reason != "unit files changed; dirty marker" {
		t.Errorf("reload reasons %q: each once", p.Steps[0].Reason)
	}
	if got := summary(endPlan(nil, nil, nil)); len(got) != 0 {
		t.Errorf("nothing to reload or start: %q", got)
	}
}

// A converge across several slices reaches what one plan of the whole
// set reaches: every job written, each orphan judged by the snapshot of
// its own page (not its slice, not the pages' Common), one reload before
// every start. The set comes in pages of 3 jobs (two snapshots), the
// slices hold 2 names; two orphans with the same revision sit in the two
// pages' ranges, and only the page whose snapshot saw that write removes
// its unit.
func TestSlicedConvergeIsTheWholePlan(t *testing.T) {
	old := wire.Snapshot{Xmin: 80, Xmax: 80}     // page 1: did not see tx 90
	newer := wire.Snapshot{Xmin: 100, Xmax: 100} // page 2: saw it
	var jobs []wire.Job
	for i := 0; i < 6; i++ {
		jobs = append(jobs, job(nthID(10*i+10), rev(50)))
	}
	orphan1, orphan2 := job(nthID(15), rev(90)), job(nthID(45), rev(90)) // in page 1's and page 2's ranges
	set := wire.DesiredSet{Jobs: jobs, Snapshot: old.Common(newer),
		Pages: wire.PageSnapshots{{Last: jobs[2].ID, Snapshot: old}, {Snapshot: newer}}}
	converge := func(n int) (wire.NodeReport, []string, map[string]string) {
		defer setSliceJobs(n)()
		dir := t.TempDir()
		m, f := managerAt(t, dir)
		changed := job(jobs[3].ID, rev(50), func(j *wire.Job) { j.Schedule = "0 4 * * *" })
		if _, err := m.Apply(context.Background(), []wire.Job{jobs[0], changed, orphan1, orphan2}); err != nil {
			t.Fatal(err)
		}
		f.calls = nil
		rep, err := m.Reconcile(context.Background(), set)
		if err != nil {
			t.Fatal(err)
		}
		return rep, f.Calls(), tree(t, dir)
	}
	wantRep, _, wantTree := converge(1000)
	rep, calls, got := converge(2)
	if !reflect.DeepEqual(got, wantTree) {
		t.Errorf("files after a sliced converge differ from one plan's:\n got %v\nwant %v", keys(got), keys(wantTree))
	}
	if !reflect.DeepEqual(sortedReport(rep), sortedReport(wantRep)) {
		t.Errorf("report of a sliced converge\n got %+v\nwant %+v", sortedReport(rep), sortedReport(wantRep))
	}
	if rep.Reloads != 1 || countPrefix(calls, "reload") != 1 {
		t.Errorf("sliced converge: %d reloads (calls %q), want one", rep.Reloads, calls)
	}
	if r := slices.Index(calls, "reload"); r < 0 || slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "start ") || strings.HasPrefix(c, "restart ") }) < r {
		t.Errorf("a timer started before the reload: %q", calls)
	}
	if n := countPrefix(calls, "start "); n != 4 {
		t.Errorf("%d starts, want the 4 new jobs' (calls %q)", n, calls)
	}
	if countPrefix(calls, "restart ") != 1 {
		t.Errorf("the job whose schedule changed is not restarted once: %q", calls)
	}
	if !slices.Contains(rep.Removed, orphan2.UnitName()) || slices.Contains(rep.Removed, orphan1.UnitName()) ||
		!slices.Contains(rep.Kept, orphan1.UnitName()) {
		t.Errorf("orphans: removed %q kept %q; want %s removed by page 2's snapshot, %s kept by page 1's",
			rep.Removed, rep.Kept, orphan2.UnitName(), orphan1.UnitName())
	}
	if !strings.Contains(got["jobs/"+tombstoneFile], fmt.Sprintf(`"xmin": %d`, newer.Xmin)) {
		t.Errorf("orphan's tombstone does not record its page's snapshot: %s", got["jobs/"+tombstoneFile])
	}
}

// A converge whose slices all remove orphans keeps every slice's
// tombstones: each slice reads the file the one before it wrote.
func TestSlicedConvergeKeepsEverySlicesTombstones(t *testing.T) {
	defer setSliceJobs(1)()
	m, _ := testManager(t)
	var orphans []wire.Job
	for i := 0; i < 4; i++ {
		orphans = append(orphans, job(nthID(i+1), rev(50)))
	}
	if _, err := m.Apply(context.Background(), orphans); err != nil {
		t.Fatal(err)
	}
	rep, err := m.Reconcile(context.Background(), wire.DesiredSet{Snapshot: testSnap})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Removed) != 4 || rep.Reloads != 1 {
		t.Fatalf("report %+v: want 4 removed, one reload", rep)
	}
	m.now = func() time.Time { return testNow.Add(time.Second) }
	ts, unreadable := m.tombstones()
	for _, j := range orphans {
		if _, ok := ts[j.UnitName()]; !ok || unreadable {
			t.Errorf("no tombstone for %s (unreadable %v): %v", j.UnitName(), unreadable, ts)
		}
	}
}

func countPrefix(calls []string, p string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, p) {
			n++
		}
	}
	return n
}

// sortedReport is rep with its lists sorted (slices report in slice order).
func sortedReport(rep wire.NodeReport) wire.NodeReport {
	for _, l := range []*[]string{&rep.Written, &rep.Specs, &rep.Removed, &rep.Enabled, &rep.Disabled, &rep.Failed, &rep.Kept, &rep.Stale} {
		*l = append([]string(nil), *l...)
		sort.Strings(*l)
	}
	return rep
}
