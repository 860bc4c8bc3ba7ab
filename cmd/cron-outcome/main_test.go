package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/units"
)

const testJob = "0b5e7a52-3c1d-4f6e-9a8b-2d4c6e8f0a1b"

// A run of slot 00:00 under "0 * * * *" (version 1) is still running when
// the tenant changes the schedule to "30 * * * *" (version 2), or deletes
// the job: the node agent rewrites or removes the spec file under the
// running service, and systemd 252 has removed the run's own copy
// ($CREDENTIALS_DIRECTORY) by the time ExecStopPost runs. The hook must
// still report the run that really happened, under its own key, judged by
// the spec the agent kept; and a record must not pass on the new schedule
// for a slot it does not have.
func TestScheduleChangeDuringRunStillReported(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give the runtime dir to a non-root owner")
	}
	slot := time.Now().UTC().Truncate(time.Hour)
	started := jobspec.Spec{Tenant: "t1", ID: testJob, Version: 1, Schedule: "0 * * * *", Timezone: "UTC", Command: "true"}
	changed := started
	changed.Version, changed.Schedule, changed.NotBefore = 2, "30 * * * *", slot.Add(time.Minute)
	for _, tt := range []struct {
		name string
		next *jobspec.Spec // nil: deleted
	}{{"schedule changed", &changed}, {"job deleted", nil}} {
		t.Run(tt.name, func(t *testing.T) {
			specPath := filepath.Join(t.TempDir(), units.Name("t1", testJob)+".json")
			writeSpec(t, specPath, started)
			agentReplaces(t, specPath, tt.next) // as unitmgr's executor does
			rec := ranRecord(t, slot, 1)
			got, details, err := readRecord(specPath, testJob, quiet)
			if err != nil || !details {
				t.Fatalf("run of %s refused after the change: details=%v err=%v", slot.Format(time.RFC3339), details, err)
			}
			if got.RunKey != rec.RunKey || got.Version != 1 {
				t.Fatalf("got %+v", got)
			}
			// The same slot claimed under the new version is no run.
			if tt.next != nil {
				ranRecord(t, slot, 2)
				if _, _, err := readRecord(specPath, testJob, quiet); !errors.Is(err, outcome.ErrBadRecord) {
					t.Fatalf("slot %s accepted under a version whose schedule lacks it: %v", slot.Format(time.RFC3339), err)
				}
			}
		})
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func writeSpec(t *testing.T, p string, s jobspec.Spec) {
	t.Helper()
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// agentReplaces replaces (or removes, next nil) the spec as the node agent
// does: it keeps the old one first.
func agentReplaces(t *testing.T, specPath string, next *jobspec.Spec) {
	t.Helper()
	var b []byte
	if next != nil {
		b, _ = next.Marshal()
	}
	if err := jobspec.KeepReplaced(specPath, strings.TrimSuffix(filepath.Base(specPath), ".json"), b); err != nil {
		t.Fatal(err)
	}
	if next == nil {
		if err := os.Remove(specPath); err != nil {
			t.Fatal(err)
		}
		return
	}
	writeSpec(t, specPath, *next)
}

// ranRecord leaves the record of a run of slot under version in a runtime
// dir of a non-root user, as the runner would, and points the hook's
// environment at it (no credentials: systemd 252 removed them).
func ranRecord(t *testing.T, slot time.Time, version int64) runner.Record {
	t.Helper()
	rt := filepath.Join(t.TempDir(), "runtime")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	at := slot.Add(2 * time.Second)
	code := 0
	rec := runner.Record{Kind: runner.KindRan, RunKey: runkey.Scheduled(testJob, slot), Slot: slot, Version: version,
		Trigger: "scheduled", StartedAt: &at, FinishedAt: &at, ExitCode: &code, Node: "n1"}
	if err := runner.WriteRecord(rt, rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{rt, filepath.Join(rt, runner.RecordFile)} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("RUNTIME_DIRECTORY", rt)
	t.Setenv("USER", "")
	t.Setenv("CREDENTIALS_DIRECTORY", filepath.Join(rt, "gone"))
	return rec
}
