package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/jobspec"
)

const id = "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71"

// setup writes a spec for a 10-second schedule and returns an Env whose
// clock stands 3 s after the slot 12:00:10.
func setup(t *testing.T, command string) (Env, string) {
	return setupWith(t, command, "*/10 * * * * *", time.Date(2026, 11, 21, 12, 0, 13, 0, time.UTC))
}

// setupWith writes a spec for schedule (with seconds) and returns an Env
// of node1 whose clock stands at now, and the lock dir.
func setupWith(t *testing.T, command, schedule string, now time.Time) (Env, string) {
	dir := t.TempDir()
	web, locks, rt := filepath.Join(dir, "www"), filepath.Join(dir, ".locks"), filepath.Join(dir, "run")
	for _, d := range []string{web, locks, rt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	spec := jobspec.Spec{Tenant: "acme", ID: id, Version: 4, Schedule: schedule, Timezone: "UTC",
		Command: command, Webroot: web, LockDir: locks}
	b, _ := spec.Marshal()
	specPath := filepath.Join(dir, "spec")
	if err := os.WriteFile(specPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return Env{SpecPath: specPath, RuntimeDir: rt, Node: "node1", Now: func() time.Time { return now }, StampWait: 200 * time.Millisecond}, locks
}

func record(t *testing.T, env Env) Record {
	t.Helper()
	r, err := ReadRecord(env.RuntimeDir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRunRecordsSlotAndExit(t *testing.T) {
	env, locks := setup(t, `pwd > out; echo "$1" 'x y'; exit 3`)
	if code := Run(env); code != 3 {
		t.Fatalf("exit %d, want 3", code)
	}
	r := record(t, env)
	if r.Kind != KindRan || r.ExitCode == nil || *r.ExitCode != 3 || r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" || r.StartedAt == nil || r.FinishedAt == nil {
		t.Errorf("record %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "out")); string(b) != filepath.Join(filepath.Dir(locks), "www")+"\n" {
		t.Errorf("command ran in %q, want the webroot", b)
	}
	// The same slot again (another node, later delay): silent skip.
	if code := Run(env); code != ExitSkip {
		t.Errorf("second run of the slot: exit %d, want %d", code, ExitSkip)
	}
	if r := record(t, env); r.Kind != KindContention {
		t.Errorf("second run record %+v", r)
	}
}

func TestCommandExit75IsNotContention(t *testing.T) {
	env, _ := setup(t, "exit 75")
	if code := Run(env); code == ExitSkip || code == 0 {
		t.Fatalf("exit %d: a command's own 75 must not look like a skip", code)
	}
	if r := record(t, env); r.Kind != KindRan || *r.ExitCode != 75 {
		t.Errorf("record %+v", r)
	}
}

// TestCommandExitsOfTheRunnerAreMapped: a command's own 75 and 76 leave
// the runner with 1, so systemd never sees a skip or a platform error the
// runner did not decide; the record keeps the command's code.
func TestCommandExitsOfTheRunnerAreMapped(t *testing.T) {
	for _, c := range []int{ExitSkip, ExitPlatformError} {
		env, _ := setup(t, fmt.Sprintf("exit %d", c))
		if code := Run(env); code != 1 {
			t.Errorf("command exit %d: runner exit %d, want 1", c, code)
		}
		if r := record(t, env); r.Kind != KindRan || r.ExitCode == nil || *r.ExitCode != c {
			t.Errorf("command exit %d: record %+v", c, r)
		}
	}
}

func TestSignalRecorded(t *testing.T) {
	env, _ := setup(t, "kill -KILL $$")
	if code := Run(env); code != 128+9 {
		t.Errorf("exit %d", code)
	}
	if r := record(t, env); r.Signal != "SIGKILL" || r.ExitCode != nil {
		t.Errorf("record %+v", r)
	}
}

// holdLock takes the job's lock as another node would and writes stamp.
func holdLock(t *testing.T, locks string, stamp string) *os.File {
	f, err := os.OpenFile(filepath.Join(locks, "cron-"+id+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if stamp != "" {
		if err := os.WriteFile(filepath.Join(locks, "cron-"+id+".slot"), []byte(stamp+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestBusyLockSameSlotIsContention(t *testing.T) {
	env, locks := setup(t, "touch ran")
	holdLock(t, locks, "2026-11-21T12:00:10Z")
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d", code)
	}
	if r := record(t, env); r.Kind != KindContention {
		t.Errorf("record %+v", r)
	}
}

func TestBusyLockOlderSlotIsOverlap(t *testing.T) {
	env, locks := setup(t, "touch ran")
	holdLock(t, locks, "2026-11-21T12:00:00Z")
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d", code)
	}
	r := record(t, env)
	if r.Kind != KindOverlap || r.RunKey != id+"#scheduled#2026-11-21T12:00:10Z" {
		t.Errorf("record %+v", r)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(locks), "www", "ran")); err == nil {
		t.Error("command ran despite the overlap")
	}
}

func TestLockDirSymlinkRefused(t *testing.T) {
	env, locks := setup(t, "true")
	os.Remove(locks)
	if err := os.Symlink(t.TempDir(), locks); err != nil {
		t.Fatal(err)
	}
	if code := Run(env); code != ExitPlatformError {
		t.Errorf("exit %d, want %d", code, ExitPlatformError)
	}
	if r := record(t, env); r.Kind != KindPlatformError || !strings.Contains(r.Reason, "node node1: lock dir") {
		t.Errorf("record %+v", r)
	}
}

func TestMemoryWatchKillsOverLimit(t *testing.T) {
	env, _ := setup(t, `x=$(head -c 200000000 /dev/zero | tr '\0' x); echo survived`)
	b, _ := os.ReadFile(env.SpecPath)
	b = []byte(strings.Replace(string(b), `"max_memory_mb": 0`, `"max_memory_mb": 32`, 1))
	if err := os.WriteFile(env.SpecPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := Run(env); code != 128+9 {
		t.Errorf("exit %d, want SIGKILL", code)
	}
	if r := record(t, env); !r.OOMKilled || r.Signal != "SIGKILL" {
		t.Errorf("record %+v", r)
	}
}

// The command learns its run from its environment: key, slot, trigger
// and attempt, as the runner decided them (a scheduled slot, then a
// run-now request), whatever HOSTCRON_ values the runner inherited.
func TestCommandSeesItsRun(t *testing.T) {
	t.Setenv("HOSTCRON_TRIGGER", "forged")
	t.Setenv("HOSTCRON_RUN_KEY", "forged")
	t.Setenv("HOSTCRON_CRON_JOB_ID", "forged")
	env, locks := setup(t, `env | grep '^HOSTCRON_' | sort > "env-$HOSTCRON_TRIGGER"`)
	if code := Run(env); code != 0 {
		t.Fatalf("scheduled run: exit %d, record %+v", code, record(t, env))
	}
	env.ManualDir = t.TempDir()
	writeRequest(t, env.ManualDir, "42", env.Now().Add(-time.Second))
	if code := Run(env); code != 0 { // the slot ran: the start takes the request
		t.Fatalf("manual run: exit %d, record %+v", code, record(t, env))
	}
	web := filepath.Join(filepath.Dir(locks), "www")
	for trigger, want := range map[string]string{
		"scheduled": "HOSTCRON_ATTEMPT=1\nHOSTCRON_CRON_JOB_ID=" + id + "\nHOSTCRON_RUN_KEY=" + id + "#scheduled#2026-11-21T12:00:10Z\n" +
			"HOSTCRON_SLOT=2026-11-21T12:00:10Z\nHOSTCRON_TENANT=acme\nHOSTCRON_TRIGGER=scheduled\n",
		"manual": "HOSTCRON_ATTEMPT=1\nHOSTCRON_CRON_JOB_ID=" + id + "\nHOSTCRON_RUN_KEY=" + id + "#manual#42\n" +
			"HOSTCRON_SLOT=2026-11-21T12:00:12Z\nHOSTCRON_TENANT=acme\nHOSTCRON_TRIGGER=manual\n",
	} {
		b, err := os.ReadFile(filepath.Join(web, "env-"+trigger))
		if err != nil {
			t.Errorf("%s run: %v", trigger, err)
			continue
		}
		if string(b) != want {
			t.Errorf("%s run's environment:\n%s\nwant:\n%s", trigger, b, want)
		}
	}
}

// The command must not be in any process's argv (/proc/PID/cmdline is
// readable by every local user), yet keep what sh -c gives it: $0, the
// shell's own process group, stdin /dev/null, no leaked pipe on fd 3, and
// its exit status.
func TestCommandNotInCmdline(t *testing.T) {
	const secret = "s3cr3t-db-password"
	env, locks := setup(t, `: `+secret+`; tr '\0' ' ' < /proc/$$/cmdline > cmdline; echo "$0" > zero; `+
		`ps -o pgid= -p $$ > pgid; echo $$ > pid; readlink /proc/$$/fd/0 > stdin; `+
		`sh -c 'test -e /proc/$$/fd/3 && echo open || echo closed' > fd3; exit 7`)
	if code := Run(env); code != 7 {
		t.Fatalf("exit %d, want 7", code)
	}
	web := filepath.Join(filepath.Dir(locks), "www")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(web, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := read("cmdline"); strings.Contains(got, secret) || got != strings.Join(shellArgs, " ") {
		t.Errorf("shell cmdline %q: want %q, without the command", got, strings.Join(shellArgs, " "))
	}
	if got := read("zero"); got != "/bin/sh" {
		t.Errorf("$0 = %q, want /bin/sh as with sh -c", got)
	}
	if pgid, pid := read("pgid"), read("pid"); pgid != pid {
		t.Errorf("shell pgid %s, pid %s: the shell must lead its own process group", pgid, pid)
	}
	if got := read("stdin"); got != "/dev/null" {
		t.Errorf("stdin %q, want /dev/null", got)
	}
	if got := read("fd3"); got != "closed" {
		t.Errorf("the command pipe is %s in the command's children, want closed", got)
	}
	if r := record(t, env); r.Kind != KindRan || r.ExitCode == nil || *r.ExitCode != 7 {
		t.Errorf("record %+v", r)
	}
}

// A syntax error is the shell's exit status 2, as with sh -c, not a setup
// error of the runner.
func TestCommandSyntaxError(t *testing.T) {
	env, _ := setup(t, `echo (`)
	if code := Run(env); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if r := record(t, env); r.Kind != KindRan || r.ExitCode == nil || *r.ExitCode != 2 {
		t.Errorf("record %+v", r)
	}
}

// ReadRecord loads the record from dir as the runner wrote it (the tests'
// reader; cron-outcome reads it as hostile input, outcome.ReadRecord).
func ReadRecord(dir string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		return r, fmt.Errorf("read record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode record: %w", err)
	}
	return r, nil
}

// TestRunRecordsUsage: the record says what the command used: CPU seconds
// and the peak resident set of the largest process it waited for. The
// command holds 48 MiB (a shell variable of that size) and burns CPU, so
// both figures have a floor the measurement must reach.
func TestRunRecordsUsage(t *testing.T) {
	env, _ := setup(t, `x=$(head -c 50331648 /dev/zero | tr '\0' a); i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo ${#x}`)
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := record(t, env)
	if r.PeakMemoryBytes < 48<<20 {
		t.Errorf("peak memory %d bytes, want at least the 48 MiB the command held", r.PeakMemoryBytes)
	}
	if r.CPUSeconds <= 0.01 {
		t.Errorf("CPU %.3f s, want the loop's CPU time", r.CPUSeconds)
	}
}

// TestTermEscalatesToKill: a command that ignores SIGTERM is killed, with
// its whole group, once the grace after the runner's SIGTERM is over, so
// a cancel ends a run; the record says SIGKILL.
func TestTermEscalatesToKill(t *testing.T) {
	env, _ := setup(t, `trap '' TERM; sleep 30 & wait; sleep 30`)
	env.KillGrace = 300 * time.Millisecond
	sigtermOnceRan(env)
	start := time.Now()
	code := Run(env)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the command ran %v after SIGTERM: not killed", took)
	}
	r := record(t, env)
	if r.Signal != "SIGKILL" || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("record signal %q, exit %d: want SIGKILL after the grace", r.Signal, code)
	}
}

// sigtermOnceRan sends SIGTERM to this test process, which is the runner,
// a moment after the runner's record says "ran": only then is its handler
// installed (before it, SIGTERM would end the test process).
func sigtermOnceRan(env Env) {
	go func() {
		for {
			if b, err := os.ReadFile(filepath.Join(env.RuntimeDir, RecordFile)); err == nil && strings.Contains(string(b), `"kind":"ran"`) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
}
