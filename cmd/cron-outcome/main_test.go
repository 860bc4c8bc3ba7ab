package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
)

const testJob = "0b5e7a52-3c1d-4f6e-9a8b-2d4c6e8f0a1b"

// A run of slot 00:00 under "0 * * * *" (version 1) is still running when
// the tenant changes the schedule to "30 * * * *" (version 2): the node
// agent rewrites the spec file under the running service. The hook must
// still report the run that really happened, under its own key.
func TestScheduleChangeDuringRunStillReported(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give the runtime dir to a non-root owner")
	}
	base := t.TempDir()
	slot := time.Now().UTC().Truncate(time.Hour)
	started := jobspec.Spec{Tenant: "t1", ID: testJob, Version: 1, Schedule: "0 * * * *", Timezone: "UTC", Command: "true"}
	current := started
	current.Version, current.Schedule, current.NotBefore = 2, "30 * * * *", slot.Add(time.Minute)

	writeSpec := func(p string, s jobspec.Spec) {
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	specPath := filepath.Join(base, "jobs", "cron.json")
	writeSpec(specPath, current)
	creds := filepath.Join(base, "credentials")
	writeSpec(filepath.Join(creds, "spec"), started)

	rt := filepath.Join(base, "runtime")
	if err := os.Mkdir(rt, 0o700); err != nil {
		t.Fatal(err)
	}
	at := slot.Add(2 * time.Second)
	code := 0
	rec := runner.Record{Kind: runner.KindRan, RunKey: runkey.Scheduled(testJob, slot), Slot: slot, Version: 1,
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
	t.Setenv("CREDENTIALS_DIRECTORY", creds)

	got, details, err := readRecord(specPath, testJob, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || !details {
		t.Fatalf("run of %s refused after a schedule change: details=%v err=%v", slot.Format(time.RFC3339), details, err)
	}
	if got.RunKey != rec.RunKey || got.Version != 1 {
		t.Fatalf("got %+v", got)
	}
}
