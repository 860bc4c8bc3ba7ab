package runner_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// Shared storage that hangs after the command has ended (an MDS failover,
// a client eviction) must not hold the runner in the lock's release until
// the unit's start timeout kills it: the hook would then report the
// tenant's timeout for a command that ended in time, and lose its real
// result. The runner gives up waiting for the release 2 s before that
// timeout (timeoutMargin), writes the command's result and exits with its
// status, so systemd and the record both say how the command ended. A
// command that planted the hang itself (a FIFO in the stamp's place, as
// here: the release's read blocks in open, as on a hung mount) gains
// nothing by it: its failure is reported and counted. (Runner and hook
// meet here: the test is outside both packages.)
func TestStorageHangAfterTheCommandDoesNotHideItsResult(t *testing.T) {
	for _, code := range []int{0, 3} {
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
			Command: "rm -f " + stamp + " && mkfifo " + stamp + " && exit " + strconv.Itoa(code), Webroot: web, LockDir: locks, TimeoutSec: 5}
		b, _ := spec.Marshal()
		specPath := filepath.Join(dir, "spec")
		if err := os.WriteFile(specPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 11, 21, 12, 0, 13, 0, time.UTC)
		env := runner.Env{SpecPath: specPath, RuntimeDir: rt, Node: "node1", Now: func() time.Time { return now },
			StampWait: 200 * time.Millisecond, Started: time.Now()}
		done := make(chan int, 1)
		go func() { done <- runner.Run(env) }()
		var exit int
		select {
		case exit = <-done:
		case <-time.After(time.Duration(spec.TimeoutSec)*time.Second - 500*time.Millisecond):
			t.Fatalf("exit %d: the runner still waits on the hung release when the unit's timeout is half a second away", code)
		}
		// Unblock the release left behind (a writer opens the FIFO).
		if fd, err := unix.Open(stamp, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
		raw, _ := os.ReadFile(filepath.Join(rt, runner.RecordFile))
		var rec runner.Record
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatal(err)
		}
		if exit != code || rec.Kind != runner.KindRan || rec.ExitCode == nil || *rec.ExitCode != code || rec.FinishedAt == nil {
			t.Fatalf("command exit %d: runner exit %d, record %s; want the command's status in both", code, exit, raw)
		}
		// What cron-outcome sees: the runner exited with the command's status.
		svc := outcome.Service{Result: "exit-code", ExitCode: "exited", ExitStatus: strconv.Itoa(exit)}
		want := wire.ResultExitCode
		if code == 0 {
			svc.Result, want = "success", wire.ResultSuccess
		}
		if r, _ := outcome.Classify(svc, rec, true, now.Add(10*time.Second)); r.Result != want {
			t.Errorf("command exit %d, storage hung afterwards: reported %s (%q), want %s", code, r.Result, r.FailureReason, want)
		}
	}
}
