package outcome

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

const attackJob = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"

var attackNow = time.Date(2026, 11, 21, 12, 0, 13, 0, time.UTC)

// In the re-executed test binary: be cron-run (runner.Run) for the spec.
func TestMain(m *testing.M) {
	if spec := os.Getenv("HOSTCRON_TEST_RUNNER_SPEC"); spec != "" {
		os.Exit(runner.Run(runner.Env{SpecPath: spec, RuntimeDir: os.Getenv("HOSTCRON_TEST_RUNNER_RT"), Node: "node1",
			Now: func() time.Time { return attackNow }, StampWait: 200 * time.Millisecond}))
	}
	os.Exit(m.Run())
}

// A tenant's command fails (it would exit 3), but first rewrites its run
// record to "started" and SIGKILLs its runner ($PPID: kill(2) needs only the
// same uid; PR_SET_DUMPABLE and ProtectProc=invisible do not stop it).
// systemd sees the main process killed (SERVICE_RESULT=signal,
// EXIT_CODE=killed, EXIT_STATUS=KILL). A "started" record is a platform
// error only with the runner's own exit 76 or the unit's timeout; this run
// must be reported as the tenant's failure (a signal), which counts.
func TestTenantKillsRunnerForPlatformError(t *testing.T) {
	dir := t.TempDir()
	web, locks, rt := filepath.Join(dir, "www"), filepath.Join(dir, ".locks"), filepath.Join(dir, "run")
	for _, d := range []string{web, locks, rt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	command := `f="$HOSTCRON_TEST_RUNNER_RT/record.json"; sed 's/"kind":"ran"/"kind":"started"/; s/,"started_at":"[^"]*"//' "$f" > "$f.x" && mv "$f.x" "$f"; kill -KILL $PPID; exit 3`
	spec := jobspec.Spec{Tenant: "acme", ID: attackJob, Version: 4, Schedule: "*/10 * * * * *", Timezone: "UTC",
		Command: command, Webroot: web, LockDir: locks}
	b, _ := spec.Marshal()
	specPath := filepath.Join(dir, "spec")
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOSTCRON_TEST_RUNNER_SPEC="+specPath, "HOSTCRON_TEST_RUNNER_RT="+rt)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("runner not killed by its command: %v", err)
	}
	// What systemd 252 hands ExecStopPost for a Type=oneshot main process killed by SIGKILL.
	svc := Service{Result: "signal", ExitCode: "killed", ExitStatus: "KILL"}
	chownTenant(t, rt)
	chownTenant(t, filepath.Join(rt, runner.RecordFile))
	sched, _ := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone)
	rec, err := ReadRecord(rt, Expect{JobID: attackJob, UID: tenantUID(t), Specs: []KnownSpec{{Version: 4, Fires: sched.Matches}}, Now: attackNow})
	if err != nil {
		t.Fatalf("record refused: %v", err)
	}
	rec, herr := HoldToSystemd(svc, rec)
	r, silent := Classify(svc, rec, true, attackNow)
	t.Logf("hold: %v; report: silent=%v result=%s reason=%q", herr, silent, r.Result, r.FailureReason)
	if silent || r.Result == wire.ResultPlatformError {
		t.Fatalf("a command that ran and failed is reported %q (silent %v): never counted toward auto-disable", r.Result, silent)
	}
}

// Latent: with Type=exec/simple (EXIT_CLEAN_DAEMON) systemd calls a main
// process killed by SIGHUP/SIGTERM/SIGPIPE a clean exit (SERVICE_RESULT=
// success). The Go runner dies of an un-Notified SIGHUP, so `kill -HUP $PPID`
// would turn any failing run into success. Only Type=oneshot keeps this off.
func TestRunnerKilledButServiceSuccessIsNotSuccess(t *testing.T) {
	started := attackNow
	rec := runner.Record{Kind: runner.KindRan, RunKey: "k", Slot: attackNow.Add(-3 * time.Second), StartedAt: &started}
	svc := Service{Result: "success", ExitCode: "killed", ExitStatus: "HUP"}
	rec, _ = HoldToSystemd(svc, rec)
	if r, _ := Classify(svc, rec, true, attackNow); r.Result == wire.ResultSuccess {
		t.Fatalf("runner killed by SIGHUP reported as %s", r.Result)
	}
}
