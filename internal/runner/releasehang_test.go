package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// Shared storage that hangs after the command has ended (an MDS failover,
// a client eviction) holds the runner in its stamp I/O (the release reads
// and writes the stamp) until the unit's start timeout kills it. The
// command's end is on record before that I/O, so the hook reports the
// platform's hang, with the command's exit, not the tenant's timeout (a
// failure that counts towards auto-disable, for a command that exited 0
// in time). The hang is a FIFO in the stamp's place (a read blocks in
// open, as on a hung mount), swapped in by the command as its last act.
// (Runner and hook meet here: the test is outside both packages.)
func TestStorageHangAfterTheCommandIsThePlatforms(t *testing.T) {
	const id = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"
	dir := t.TempDir()
	web, locks, rt := filepath.Join(dir, "www"), filepath.Join(dir, ".locks"), filepath.Join(dir, "run")
	for _, d := range []string{web, locks, rt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stamp := filepath.Join(locks, wire.SlotStampName(id))
	spec := jobspec.Spec{Tenant: "acme", ID: id, Version: 4, Schedule: "*/10 * * * * *", Timezone: "UTC",
		Command: "rm -f " + stamp + " && mkfifo " + stamp + " && exit 3", Webroot: web, LockDir: locks, TimeoutSec: 60}
	b, _ := spec.Marshal()
	specPath := filepath.Join(dir, "spec")
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 12, 0, 13, 0, time.UTC)
	env := runner.Env{SpecPath: specPath, RuntimeDir: rt, Node: "node1", Now: func() time.Time { return now }, StampWait: 200 * time.Millisecond}
	done := make(chan int, 1)
	go func() { done <- runner.Run(env) }()
	t.Cleanup(func() { // unblock the hung read: a writer opens and closes the FIFO
		if fd, err := unix.Open(stamp, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
		<-done
	})

	var rec runner.Record
	var raw []byte
	deadline := time.Now().Add(10 * time.Second)
	for !rec.Releasing { // the command has ended and the runner hangs in the release
		select {
		case code := <-done:
			t.Fatalf("runner returned %d: the storage did not hang", code)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of the command's end before the release; record %s", raw)
		}
		raw, _ = os.ReadFile(filepath.Join(rt, runner.RecordFile))
		rec = runner.Record{}
		_ = json.Unmarshal(raw, &rec)
	}
	if rec.Kind != runner.KindRan || rec.ExitCode == nil || *rec.ExitCode != 3 || rec.FinishedAt == nil {
		t.Fatalf("record while releasing %s: want ran, exit 3, finished", raw)
	}
	// What cron-outcome sees after the start timeout killed the runner.
	svc := outcome.Service{Result: "timeout", ExitCode: "killed", ExitStatus: "KILL"}
	r, silent := outcome.Classify(svc, rec, true, now.Add(61*time.Second))
	if silent || r.Result != wire.ResultPlatformError || !strings.Contains(r.FailureReason, "exit status 3") ||
		r.ExitCode == nil || *r.ExitCode != 3 {
		t.Errorf("command exited 3, storage hung afterwards: reported %s (%q, exit %v), want platform_error with the command's exit",
			r.Result, r.FailureReason, r.ExitCode)
	}
}
