package outcome

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	slot := now.Add(-25 * time.Second)
	started := slot.Add(3 * time.Second)
	one, seventyFive := 1, 75
	ran := func(code *int, sig string) runner.Record {
		return runner.Record{Kind: runner.KindRan, RunKey: "k", Slot: slot, StartedAt: &started, ExitCode: code, Signal: sig}
	}
	tests := []struct {
		name       string
		svc        Service
		rec        runner.Record
		haveRecord bool
		want       wire.Result // "" = silent
	}{
		{"success", Service{Result: "success", ExitStatus: "0"}, ran(new(int), ""), true, "success"},
		{"contention", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindContention}, true, ""},
		{"skip without record", Service{Result: "success", ExitStatus: "75"}, runner.Record{RunKey: "k"}, false, ""},
		{"overlap", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindOverlap, RunKey: "k", Slot: slot}, true, "overlap_skipped"},
		{"exit code", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}, ran(&one, ""), true, "exit_code"},
		{"own 75", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}, ran(&seventyFive, ""), true, "exit_code"},
		{"signal in command", Service{Result: "exit-code", ExitStatus: "137"}, ran(nil, "SIGKILL"), true, "signal"},
		{"runner killed", Service{Result: "signal", ExitCode: "killed", ExitStatus: "TERM"}, ran(nil, ""), true, "signal"},
		{"timeout", Service{Result: "timeout", ExitCode: "killed", ExitStatus: "TERM"}, ran(nil, ""), true, "timeout"},
		{"oom by systemd", Service{Result: "oom-kill", ExitCode: "killed", ExitStatus: "KILL"}, ran(nil, "SIGKILL"), true, "oom"},
		{"oom by cgroup counter", Service{Result: "exit-code", ExitStatus: "137", OOMKills: 1, LimitOOMs: 1}, ran(nil, "SIGKILL"), true, "oom"},
		// The kernel's global OOM killer chose the job, which never reached its
		// own limit (the cgroup counted no "oom"): the node ran out of memory.
		{"global oom kill", Service{Result: "oom-kill", ExitCode: "killed", ExitStatus: "KILL", OOMKills: 1}, ran(nil, "SIGKILL"), true, "platform_error"},
		{"global oom kill, the runner exited 137", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "137", OOMKills: 1}, ran(nil, "SIGKILL"), true, "platform_error"},
		{"the runner's own memory watch", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "137"}, func() runner.Record { r := ran(nil, "SIGKILL"); r.OOMKilled = true; return r }(), true, "oom"},
		{"setup error", Service{Result: "exit-code", ExitStatus: "1"}, runner.Record{Kind: runner.KindSetupError, RunKey: "k", Slot: slot, Reason: "lock dir missing"}, true, "failed"},
		{"late fire", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindLateFire, RunKey: "k", Slot: slot}, true, ""},
		// A node whose clock is known wrong did not contend: no outcome of
		// any slot, never replacing another node's record of it.
		{"clock refused", Service{Result: "success", ExitCode: "exited", ExitStatus: "75"}, runner.Record{Kind: runner.KindClockRefused, RunKey: "k", Slot: slot, Reason: "node n1: clock 11m0s off"}, true, ""},
		{"slot before not-before", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindNotBefore, RunKey: "k", Slot: slot}, true, ""},
		{"overlap another node reports", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindOverlapSeen, RunKey: "k", Slot: slot}, true, ""},
		{"shared storage failed", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "76"}, runner.Record{Kind: runner.KindPlatformError, RunKey: "k", Slot: slot, Reason: "node n1: lock dir missing"}, true, "platform_error"},
		// The mount hung until the unit's timeout: the record never reached "ran".
		{"hung before the command", Service{Result: "timeout", ExitCode: "killed", ExitStatus: "TERM"}, runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot, Node: "n1"}, true, "platform_error"},
		// Its own command can kill the runner after rewriting the record to
		// "started": only the runner's exit 76 or the timeout make that a
		// platform error.
		{"runner killed before its record was final", Service{Result: "signal", ExitCode: "killed", ExitStatus: "KILL"}, runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot}, true, "signal"},
		{"runner killed by SIGHUP, systemd says success", Service{Result: "success", ExitCode: "killed", ExitStatus: "HUP"}, ran(new(int), ""), true, "signal"},
		{"no record, unit never started", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "243"}, runner.Record{RunKey: "k", Slot: slot}, false, "failed"},
	}
	for _, tt := range tests {
		r, silent := Classify(tt.svc, tt.rec, tt.haveRecord, now)
		got := r.Result
		if silent {
			got = ""
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q (%+v)", tt.name, got, tt.want, r)
		}
		if !silent && (r.RunKey != "k" || !r.ScheduledAt.Equal(slot)) {
			t.Errorf("%s: run key/slot lost: %+v", tt.name, r)
		}
	}
	hung := runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot, Node: "n1"}
	if r, _ := Classify(Service{Result: "timeout"}, hung, true, now); r.FailureReason != "node n1: timed out before the command started (shared storage hung?)" {
		t.Errorf("hung report %+v: want the node and the cause", r)
	}
	// A catch-up reports its trigger; any other run leaves it to the key.
	caughtUp := ran(new(int), "")
	caughtUp.Trigger = "catchup"
	if r, _ := Classify(Service{Result: "success", ExitStatus: "0"}, caughtUp, true, now); r.Trigger != wire.TriggerCatchUp {
		t.Errorf("catch-up report %+v: want trigger catchup", r)
	}
	if r, _ := Classify(Service{Result: "success", ExitStatus: "0"}, ran(new(int), ""), true, now); r.Trigger != "" {
		t.Errorf("scheduled report %+v: want no trigger", r)
	}
	if r, _ := Classify(Service{Result: "exit-code"}, ran(&seventyFive, ""), true, now); *r.ExitCode != 75 || r.FinishedAt == nil {
		t.Errorf("own 75 report %+v", r)
	}
}

// A report's finish is never before its start, so the core (which refuses
// one for good) records the run: a node clock stepped back during the
// run gives the runner's finish, or the hook's own now for a runner
// killed before it wrote one, a time before the start.
func TestReportFinishesNoEarlierThanItStarts(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	slot := now.Add(-25 * time.Second)
	startedAt := func(d time.Duration) *time.Time { t := slot.Add(d); return &t }
	timeout := Service{Result: "timeout", ExitCode: "killed", ExitStatus: "KILL"}
	tests := []struct {
		name       string
		started    *time.Time
		finished   *time.Time
		wantFinish time.Time
	}{
		{"the runner's finish after its start", startedAt(time.Second), startedAt(9 * time.Second), slot.Add(9 * time.Second)},
		{"the runner's finish before its start (clock stepped back)", startedAt(20 * time.Second), startedAt(5 * time.Second), slot.Add(20 * time.Second)},
		{"killed before its finish: the hook's now", startedAt(time.Second), nil, now},
		{"killed before its finish, now before its start (clock stepped back)", startedAt(75 * time.Second), nil, slot.Add(75 * time.Second)},
	}
	for _, tt := range tests {
		rec := runner.Record{Kind: runner.KindRan, RunKey: "k", Slot: slot, StartedAt: tt.started, FinishedAt: tt.finished}
		r, _ := Classify(timeout, rec, true, now)
		if r.Result != wire.ResultTimeout || r.FinishedAt == nil || !r.FinishedAt.Equal(tt.wantFinish) || !r.StartedAt.Equal(*tt.started) {
			t.Errorf("%s: %s, started %v, finished %v; want timeout, started %v, finished %v",
				tt.name, r.Result, r.StartedAt, r.FinishedAt, *tt.started, tt.wantFinish)
		}
	}
}

func TestParseMemoryEvents(t *testing.T) {
	for _, c := range []struct {
		text             string
		limitOOMs, kills int
	}{
		{"low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", 1, 1},
		{"low 0\nhigh 0\nmax 0\noom 0\noom_kill 2\n", 0, 2}, // the global OOM killer's
		{"", 0, 0},
		{"oom_kill x\noom\n", 0, 0},
	} {
		if l, k := parseMemoryEvents(c.text); l != c.limitOOMs || k != c.kills {
			t.Errorf("%q: oom %d oom_kill %d, want %d %d", c.text, l, k, c.limitOOMs, c.kills)
		}
	}
}
