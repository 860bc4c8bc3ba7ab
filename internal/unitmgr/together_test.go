package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

func starts(kind Kind, n int) []Step {
	var out []Step
	for i := range n {
		out = append(out, Step{Kind: kind, Unit: fmt.Sprint("u", i), Target: fmt.Sprint("u", i, ".timer")})
	}
	return out
}

func TestStartTogether(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reloads bool
		steps   []Step
		want    bool
	}{
		{"no reload, enough starts", false, starts(KindStart, minStartTogether), true},
		{"no reload, too few starts for a transaction", false, starts(KindStart, minStartTogether-1), false},
		{"a reload: every timer is loaded, one call each", true, starts(KindStart, 100), false},
		{"restarts are not counted", false, append(starts(KindRestart, 50), starts(KindStart, minStartTogether-1)...), false},
		{"starts beside restarts", false, append(starts(KindRestart, 2), starts(KindStart, minStartTogether)...), true},
		{"nothing to start", false, nil, false},
	} {
		if got := startTogether(tc.reloads, tc.steps); got != tc.want {
			t.Errorf("%s: startTogether = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func newJobs(from, n int, mods ...func(*wire.Job)) []wire.Job {
	var jobs []wire.Job
	for i := range n {
		jobs = append(jobs, job(nthID(from+i), mods...))
	}
	return jobs
}

func timersOf(jobs []wire.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.UnitName()+extTimer)
	}
	return out
}

// A new node's first converge: no daemon-reload (systemd holds none of
// the units) and one transaction starting exactly the enabled jobs'
// timers, none one by one; a disabled job's timer is never named.
func TestFirstConvergeStartsEnabledTimersInOneTransaction(t *testing.T) {
	m, f := testManager(t)
	enabled := newJobs(0, minStartTogether+2)
	off := job(nthID(500), disabled)
	rep, err := m.Apply(context.Background(), append(slices.Clone(enabled), off))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"start-together " + strings.Join(timersOf(enabled), ",")}
	if got := f.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
	for _, timer := range timersOf(enabled) {
		if !f.active[timer] {
			t.Errorf("%s not active", timer)
		}
	}
	if f.active[off.UnitName()+extTimer] || rep.Reloads != 0 || len(rep.Failed) != 0 {
		t.Errorf("disabled timer active %v, report %+v", f.active[off.UnitName()+extTimer], rep)
	}
}

// A timer the transaction left inactive is started on its own, and that
// call's error is its unit's (a unitError), as without the transaction;
// the other timers are not started a second time.
func TestTimerFailingInTheTransactionIsReportedByItsOwnStart(t *testing.T) {
	m, f := testManager(t)
	jobs := newJobs(0, minStartTogether+2)
	bad := jobs[3].UnitName() + extTimer
	f.failUnit, f.failStart = bad, errors.New("unit has a bad unit file setting")
	_, err := m.Apply(context.Background(), jobs)
	var ue *unitError
	if !errors.As(err, &ue) || ue.unit != jobs[3].UnitName() {
		t.Fatalf("error %v, want the unit error of %s", err, jobs[3].UnitName())
	}
	var one []string
	for _, c := range f.Calls() {
		if strings.HasPrefix(c, "start ") {
			one = append(one, c)
		}
	}
	if !slices.Equal(one, []string{"start " + bad}) {
		t.Errorf("one-by-one starts %q, want only %s's", one, bad)
	}
	for i, timer := range timersOf(jobs) {
		if f.active[timer] != (i != 3) {
			t.Errorf("%s active %v", timer, f.active[timer])
		}
	}
}

// A transaction systemd refuses as a whole (e.g. no transient units)
// falls back to one start per timer: every timer still starts.
func TestRefusedTransactionStartsTimersOneByOne(t *testing.T) {
	m, f := testManager(t)
	f.failTogether = errors.New("transient units refused")
	jobs := newJobs(0, minStartTogether)
	if _, err := m.Apply(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
	for _, timer := range timersOf(jobs) {
		if !slices.Contains(f.Calls(), "start "+timer) || !f.active[timer] {
			t.Errorf("%s not started one by one: %q", timer, f.Calls())
		}
	}
}

// The apply queue's isolation holds for starts in one transaction: in a
// batch of new jobs (no reload), one job's failing timer fails its own
// caller only, and every other job's timer runs.
func TestBatchTransactionStartFailureIsItsJobsCallerOnly(t *testing.T) {
	m, f, release := blockedNode(t)
	jobs := newJobs(200, minStartTogether+1) // not held: the batch needs no reload
	f.failUnit, f.failStart = jobs[2].UnitName()+extTimer, errors.New("unit is masked")
	var calls []func() (wire.NodeReport, error)
	for _, j := range jobs {
		calls = append(calls, func() (wire.NodeReport, error) { return m.Apply(context.Background(), []wire.Job{j}) })
	}
	results := queueCalls(t, m, calls)
	release()
	for i, ch := range results {
		if r := <-ch; (i == 2) != (r.err != nil) {
			t.Errorf("caller %d: error %v", i, r.err)
		}
	}
	if got := countOf(f.Calls(), "start-together"); got == 0 {
		t.Errorf("no transaction of starts: %q", f.Calls())
	}
	for i, timer := range timersOf(jobs) {
		if f.active[timer] != (i != 2) {
			t.Errorf("%s active %v", timer, f.active[timer])
		}
	}
}
