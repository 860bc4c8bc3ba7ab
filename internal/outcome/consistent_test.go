package outcome

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestRecordHeldToSystemd: the tenant's command runs as the owner of the
// run record and can rewrite it after the runner's last write. Whatever it
// claims (success after exit 3, a platform error or an overlap that never
// counts, a skip that silences the run), the reported run is what systemd
// saw the runner do; records that agree with systemd are reported as
// they are (the controls: each forged claim is believed when true).
func TestRecordHeldToSystemd(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	slot := now.Add(-25 * time.Second)
	started := slot.Add(3 * time.Second)
	code := func(c int) *int { return &c }
	rec := func(kind string, exit *int, sig string) runner.Record {
		return runner.Record{Kind: kind, RunKey: "k", Slot: slot, Version: 2, StartedAt: &started, ExitCode: exit, Signal: sig, Reason: "claimed"}
	}
	exited := func(result string, status string) Service {
		return Service{Result: result, ExitCode: "exited", ExitStatus: status}
	}
	exit3 := exited("exit-code", "3")
	killed := Service{Result: "timeout", ExitCode: "killed", ExitStatus: "KILL"}
	tests := []struct {
		name       string
		svc        Service
		rec        runner.Record
		want       wire.Result // "" = silent
		wantExit   *int
		contradict bool
	}{
		// Forgeries after a command that exited 3.
		{"success claimed after exit 3", exit3, rec(runner.KindRan, code(0), ""), wire.ResultExitCode, code(3), true},
		{"other exit code claimed", exit3, rec(runner.KindRan, code(1), ""), wire.ResultExitCode, code(3), true},
		{"platform error claimed after exit 3", exit3, rec(runner.KindPlatformError, nil, ""), wire.ResultExitCode, code(3), true},
		{"overlap claimed after exit 3", exit3, rec(runner.KindOverlap, nil, ""), wire.ResultExitCode, code(3), true},
		{"skip claimed after exit 3", exit3, rec(runner.KindContention, nil, ""), wire.ResultExitCode, code(3), true},
		{"late fire claimed after exit 3", exit3, rec(runner.KindLateFire, nil, ""), wire.ResultExitCode, code(3), true},
		{"unfinished run claimed after exit 3", exit3, rec(runner.KindStarted, nil, ""), wire.ResultExitCode, code(3), true},
		{"setup error claimed after exit 3", exit3, rec(runner.KindSetupError, nil, ""), wire.ResultExitCode, code(3), true},
		{"success claimed after a signal", exited("exit-code", "137"), rec(runner.KindRan, code(0), ""), wire.ResultExitCode, code(137), true},
		{"command's own 76 claimed a platform error", exited("exit-code", "1"), rec(runner.KindPlatformError, nil, ""), wire.ResultExitCode, code(1), true},
		// A command that ignored SIGTERM past its timeout: the runner is killed.
		{"platform error claimed after a timeout", killed, rec(runner.KindPlatformError, nil, ""), wire.ResultTimeout, nil, true},
		{"overlap claimed after a timeout", killed, rec(runner.KindOverlap, nil, ""), wire.ResultTimeout, nil, true},
		{"skip claimed after a timeout", killed, rec(runner.KindContention, nil, ""), wire.ResultTimeout, nil, true},
		// The runner decided otherwise than the record says.
		{"success claimed over a platform error", exited("exit-code", "76"), rec(runner.KindRan, code(0), ""), wire.ResultPlatformError, nil, true},
		{"success claimed over a skip", exited("success", "75"), rec(runner.KindRan, code(0), ""), "", nil, true},
		// Controls: true records are believed.
		{"platform error", exited("exit-code", "76"), rec(runner.KindPlatformError, nil, ""), wire.ResultPlatformError, nil, false},
		{"started, then a platform error", exited("exit-code", "76"), rec(runner.KindStarted, nil, ""), wire.ResultPlatformError, nil, false},
		{"overlap", exited("success", "75"), rec(runner.KindOverlap, nil, ""), wire.ResultOverlapSkipped, nil, false},
		{"contention", exited("success", "75"), rec(runner.KindContention, nil, ""), "", nil, false},
		{"exit 3", exit3, rec(runner.KindRan, code(3), ""), wire.ResultExitCode, code(3), false},
		{"success", exited("success", "0"), rec(runner.KindRan, code(0), ""), wire.ResultSuccess, code(0), false},
		{"command's own 75", exited("exit-code", "1"), rec(runner.KindRan, code(75), ""), wire.ResultExitCode, code(75), false},
		{"command's own 76", exited("exit-code", "1"), rec(runner.KindRan, code(76), ""), wire.ResultExitCode, code(76), false},
		{"signal in the command", exited("exit-code", "137"), rec(runner.KindRan, nil, "SIGKILL"), wire.ResultSignal, nil, false},
		{"setup error", exited("exit-code", "1"), rec(runner.KindSetupError, nil, ""), wire.ResultFailed, nil, false},
		{"timeout", killed, rec(runner.KindRan, nil, ""), wire.ResultTimeout, nil, false},
		// Residual (docs/semantics.md): a killed runner's "started" record.
		{"hung shared storage", killed, rec(runner.KindStarted, nil, ""), wire.ResultPlatformError, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held, err := HoldToSystemd(tt.svc, tt.rec)
			if got := errors.Is(err, ErrContradicted); got != tt.contradict {
				t.Errorf("contradiction %v (%v), want %v", got, err, tt.contradict)
			}
			if again, err := HoldToSystemd(tt.svc, held); err != nil || again.Kind != held.Kind {
				t.Errorf("holding the held record again: %+v, %v", again, err)
			}
			if held.RunKey != "k" || !held.Slot.Equal(slot) || held.Version != 2 {
				t.Errorf("run identity lost: %+v", held)
			}
			r, silent := Classify(tt.svc, tt.rec, true, now)
			got := r.Result
			if silent {
				got = ""
			}
			if got != tt.want {
				t.Fatalf("result %q, want %q (%+v)", got, tt.want, r)
			}
			if silent {
				return
			}
			if r.RunKey != "k" || !r.ScheduledAt.Equal(slot) || r.Version != 2 {
				t.Errorf("reported under another run: %+v", r)
			}
			switch {
			case tt.wantExit == nil && r.ExitCode != nil:
				t.Errorf("exit code %d, want none", *r.ExitCode)
			case tt.wantExit != nil && (r.ExitCode == nil || *r.ExitCode != *tt.wantExit):
				t.Errorf("exit code %v, want %d", r.ExitCode, *tt.wantExit)
			}
			if tt.contradict && r.FailureReason == "claimed" {
				t.Errorf("the record's reason was reported: %+v", r)
			}
		})
	}
}

// TestForgedSkipStillNamesTheRun: a record rewritten to a silent kind after
// the command exited 3 keeps the run's identity through ReadRecord, so the
// hook reports the failure systemd saw instead of nothing (a lost run,
// which never counts); a silent record of another job names no run.
func TestForgedSkipStillNamesTheRun(t *testing.T) {
	now := time.Now()
	rec, want := validRecord(now)
	want.UID = tenantUID(t)
	rec.Kind, rec.ExitCode = runner.KindContention, nil
	dir := t.TempDir()
	b, _ := json.Marshal(rec)
	writeOwned(t, filepath.Join(dir, runner.RecordFile), b)
	got, err := ReadRecord(dir, want)
	if err != nil || got.Kind != runner.KindContention || got.RunKey != rec.RunKey || got.Version != rec.Version {
		t.Fatalf("silent record: %+v, %v", got, err)
	}
	if _, silent := Classify(Service{Result: "success", ExitCode: "exited", ExitStatus: "75"}, got, true, now); !silent {
		t.Error("a true skip was reported")
	}
	r, silent := Classify(Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "3"}, got, true, now)
	if silent || r.RunKey != rec.RunKey || r.Result != wire.ResultExitCode || r.ExitCode == nil || *r.ExitCode != 3 {
		t.Errorf("forged skip after exit 3: silent %v, %+v", silent, r)
	}

	rec.RunKey = runkey.Scheduled(jobB, rec.Slot)
	b, _ = json.Marshal(rec)
	writeOwned(t, filepath.Join(dir, runner.RecordFile), b)
	if got, err := ReadRecord(dir, want); err != nil || got.RunKey != "" || got.Kind != runner.KindContention {
		t.Errorf("silent record of another job: %+v, %v", got, err)
	}
}
