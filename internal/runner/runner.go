package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// Env is what a run needs from its environment; Main fills it from
// systemd's variables, tests set it directly.
type Env struct {
	SpecPath   string // the job spec ($CREDENTIALS_DIRECTORY/spec)
	RuntimeDir string // where the record goes ($RUNTIME_DIRECTORY)
	Now        func() time.Time
	// StampWait is how long a loser waits for the winner's stamp before
	// calling the busy lock an overlap.
	StampWait time.Duration
	// KernelMemoryLimit: the kernel enforces MemoryMax= for the unit, so
	// the runner's own memory watch stays off (see memwatch.go).
	KernelMemoryLimit bool
	// ManualDir holds run-now requests written by the node agent.
	ManualDir string
}

// manualSlot returns a run-now request for this job made in the last five
// minutes, if there is one.
func manualSlot(dir string, spec jobspec.Spec, now time.Time) (time.Time, bool) {
	if dir == "" {
		return time.Time{}, false
	}
	at, ok := readStamp(filepath.Join(dir, wire.UnitName(spec.Tenant, spec.ID)))
	if !ok || at.After(now) || now.Sub(at) > 5*time.Minute {
		return time.Time{}, false
	}
	return at, true
}

// Main runs one occurrence and returns the process exit status.
func Main() int {
	env := Env{
		SpecPath:   filepath.Join(os.Getenv("CREDENTIALS_DIRECTORY"), "spec"),
		RuntimeDir: os.Getenv("RUNTIME_DIRECTORY"),
		Now:        time.Now,
		StampWait:  time.Second,

		KernelMemoryLimit: kernelEnforcesMemory(),
		ManualDir:         wire.RunNowDir,
	}
	if env.RuntimeDir == "" || os.Getenv("CREDENTIALS_DIRECTORY") == "" {
		fmt.Fprintln(os.Stderr, "cron-run: must run from a hostcron service (no RUNTIME_DIRECTORY or CREDENTIALS_DIRECTORY)")
		return 1
	}
	return Run(env)
}

// Run elects, runs and records one occurrence.
func Run(env Env) int {
	spec, err := jobspec.Read(env.SpecPath)
	if err != nil {
		return setupError(env, Record{}, err)
	}
	sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone)
	if err != nil {
		return setupError(env, Record{}, fmt.Errorf("job spec schedule: %w", err))
	}
	// The slot is the latest occurrence at or before now: the timer fired
	// for it, at most the random delay (under half the interval) ago. A
	// pending run-now request names its own slot instead.
	slot := sched.Prev(env.Now())
	stamp := filepath.Join(spec.LockDir, wire.SlotStampName(spec.ID))
	// Run-now requests keep their own stamp, so they never stand in for a
	// scheduled slot or the other way round.
	manualStamp := filepath.Join(spec.LockDir, wire.ManualStampName(spec.ID))
	key := runkey.Scheduled(spec.ID, slot)
	if manual, ok := manualSlot(env.ManualDir, spec, env.Now()); ok {
		if last, ok := readStamp(manualStamp); !ok || last.Before(manual) {
			slot, stamp = manual, manualStamp
			key = runkey.Manual(spec.ID, manual.UTC().Format("20060102T150405Z"))
		}
	}
	rec := Record{Slot: slot.UTC(), Version: spec.Version, RunKey: key}

	lock, err := openLock(spec.LockDir, spec.ID)
	if err != nil {
		return setupError(env, rec, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return setupError(env, rec, fmt.Errorf("lock: %w", err))
		}
		rec.Kind = busyKind(stamp, slot, env.StampWait)
		return finish(env, rec, ExitSkip)
	}
	// Holding the lock: if this slot already ran on another node, skip.
	if last, ok := readStamp(stamp); ok && !last.Before(slot) {
		rec.Kind = KindContention
		return finish(env, rec, ExitSkip)
	}
	if err := writeStamp(stamp, slot); err != nil {
		return setupError(env, rec, err)
	}
	return runCommand(env, spec, rec)
}

// busyKind tells, for a lock someone else holds, whether they run this
// slot (contention, silent) or an older one (overlap). The holder writes
// its stamp right after taking the lock, so wait briefly for it.
func busyKind(stamp string, slot time.Time, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		if last, ok := readStamp(stamp); ok && !last.Before(slot) {
			return KindContention
		}
		if time.Now().After(deadline) {
			return KindOverlap
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openLock opens (creating) the job's lock file without following links.
func openLock(dir, id string) (*os.File, error) {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("lock dir %s is missing or not a directory (the node agent creates it): %v", dir, err)
	}
	p := filepath.Join(dir, wire.LockFileName(id))
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", p, err)
	}
	return os.NewFile(uintptr(fd), p), nil
}

func readStamp(path string) (time.Time, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	return t, err == nil
}

// writeStamp records the slot atomically and durably: the next node that
// gets the lock must see it.
func writeStamp(path string, slot time.Time) error {
	if err := atomicfile.Write(path, []byte(slot.UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return fmt.Errorf("slot stamp: %w", err)
	}
	return nil
}

// runCommand runs the tenant's command with /bin/sh -c in the working
// directory, forwarding SIGTERM, and records how it ended.
func runCommand(env Env, spec jobspec.Spec, rec Record) int {
	cmd := exec.Command("/bin/sh", "-c", spec.Command)
	cmd.Dir = spec.Dir()
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(childEnv(), runEnv(rec)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // one group to signal and measure
	started := env.Now().UTC()
	rec.Kind, rec.StartedAt = KindRan, &started
	// A record before the command starts: if the run is killed (timeout,
	// OOM), the outcome hook still knows the slot and the start.
	if err := WriteRecord(env.RuntimeDir, rec); err != nil {
		fmt.Fprintln(os.Stderr, "cron-run:", err)
	}
	if err := cmd.Start(); err != nil {
		return setupError(env, rec, fmt.Errorf("start command: %w", err))
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			_ = syscall.Kill(-cmd.Process.Pid, s.(syscall.Signal))
		}
	}()
	done := make(chan struct{})
	var oom <-chan bool
	if spec.MemoryMaxMB > 0 && !env.KernelMemoryLimit {
		oom = watchMemory(cmd.Process.Pid, int64(spec.MemoryMaxMB)<<20, done)
	}
	err := cmd.Wait()
	close(done)
	signal.Stop(sigs)
	close(sigs)
	if oom != nil {
		rec.OOMKilled = <-oom // the watch answers as soon as done is closed
	}
	finished := env.Now().UTC()
	rec.FinishedAt = &finished
	code := 0
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		ws := exitErr.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			rec.Signal = unix.SignalName(ws.Signal())
			code = 128 + int(ws.Signal())
		} else {
			code = ws.ExitStatus()
		}
	default:
		return setupError(env, rec, fmt.Errorf("wait for command: %w", err))
	}
	if rec.Signal == "" {
		exit := code
		rec.ExitCode = &exit
	}
	if code == ExitSkip {
		// The command's own 75 must not read as lock contention.
		code = 1
	}
	return finish(env, rec, code)
}

// runEnv tells the command which run it is: a script can make itself
// idempotent per run with HOSTCRON_RUN_KEY, and HOSTCRON_SLOT is the fire
// time it stands for (which may lie a few seconds before now).
func runEnv(rec Record) []string {
	return []string{
		"HOSTCRON_RUN_KEY=" + rec.RunKey,
		"HOSTCRON_SLOT=" + rec.Slot.UTC().Format(time.RFC3339),
	}
}

// childEnv is the runner's environment without hostcron's plumbing.
func childEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CREDENTIALS_DIRECTORY=") || strings.HasPrefix(kv, "RUNTIME_DIRECTORY=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func setupError(env Env, rec Record, err error) int {
	fmt.Fprintln(os.Stderr, "cron-run:", err)
	rec.Kind, rec.Reason = KindSetupError, err.Error()
	return finish(env, rec, 1)
}

func finish(env Env, rec Record, code int) int {
	if err := WriteRecord(env.RuntimeDir, rec); err != nil {
		fmt.Fprintln(os.Stderr, "cron-run:", err)
	}
	return code
}
