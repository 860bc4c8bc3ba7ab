package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/clockoffset"
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
	Node       string // this node's name, for records and leases
	Now        func() time.Time
	// StampWait is how long a loser polls for the holder's stamp before it
	// decides the busy lock is not its own run: seconds, since a network
	// filesystem can take that long to show another client's write.
	StampWait time.Duration
	// KillGrace overrides KillGrace (tests); 0: KillGrace.
	KillGrace time.Duration
	// Heartbeat is how often a running run refreshes its lease.
	Heartbeat time.Duration
	// KernelMemoryLimit: the kernel enforces MemoryMax= for the unit, so
	// the runner's own memory watch stays off (see memwatch.go).
	KernelMemoryLimit bool
	// MemoryCgroup is the unit's cgroup.procs file, whose processes the
	// memory watch measures and kills; "" outside a service (tests): the
	// watch then follows the command's process group.
	MemoryCgroup string
	// ManualDir holds run-now requests written by the node agent.
	ManualDir string
	// ClockFile is the agent's latest measurement of this node's clock
	// (wire.ClockOffsetFile); "" is none.
	ClockFile string
	// Boot reads the kernel's boot id and CLOCK_BOOTTIME, which age the
	// clock reading (judgeClock); nil or an error: the reading is unknown.
	Boot func() (clockoffset.Boot, error)
	// Output receives the command's output, line by line (nil: stdout,
	// the unit's journal stream); OutputLimits bound it (zero: the
	// DefaultOutputLimits).
	Output       io.Writer
	OutputLimits OutputLimits
	// Start is systemd's word on why the service started.
	Start Start
	// Started is when this start of the unit began, by the real clock
	// (zero: when Run began). Main takes its own start, a little after
	// systemd's: the margin of drainBound covers the difference.
	Started time.Time
	// Sleep waits out a catch-up's spread and an overlap wait's polls
	// (nil: time.Sleep), or returns false when the runner was asked to
	// stop meanwhile (tests).
	Sleep func(time.Duration) bool
	// OverlapPoll overrides OverlapPoll (tests); 0: OverlapPoll.
	OverlapPoll time.Duration
	Log         *slog.Logger
	// beats, when set (tests), drives the heartbeat instead of the
	// Heartbeat ticker: each value asks for one beat, and is closed once
	// that beat is done.
	beats <-chan chan struct{}
	// stop receives the SIGTERM or SIGINT that stops a catch-up before
	// its command starts (Run sets it for a catch-up's wait; nil: never).
	stop <-chan os.Signal
	// electing, when set (tests), is called as the lock's holder begins
	// its election (won), before any of its stamp I/O.
	electing func()
}

// Main runs one occurrence and returns the process exit status.
func Main() int {
	started := time.Now() // first: the unit's start timeout runs already
	// Not dumpable: the tenant's command runs as the same user, and a
	// dumpable runner could be attached to (ptrace, /proc/PID/mem) and
	// made to exit with ExitPlatformError. Its children are dumpable again
	// after execve.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	node, _ := os.Hostname()
	env := Env{
		SpecPath:   filepath.Join(os.Getenv("CREDENTIALS_DIRECTORY"), "spec"),
		RuntimeDir: os.Getenv("RUNTIME_DIRECTORY"),
		Node:       node,
		Now:        time.Now,
		StampWait:  5 * time.Second,
		Heartbeat:  HeartbeatEvery,

		KernelMemoryLimit: kernelEnforcesMemory(),
		MemoryCgroup:      unitCgroupProcs(),
		ManualDir:         wire.RunNowDir,
		ClockFile:         wire.ClockOffsetFile,
		Boot:              clockoffset.CurrentBoot,
		Start:             startFromEnv(),
		Started:           started,
		Log:               slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "cron-run"),
	}
	if env.RuntimeDir == "" || os.Getenv("CREDENTIALS_DIRECTORY") == "" {
		env.Log.Error("must run from a hostcron service (no RUNTIME_DIRECTORY or CREDENTIALS_DIRECTORY)")
		return 1
	}
	return Run(env)
}

// startFromEnv reads why systemd started the service.
func startFromEnv() Start {
	var s Start
	s.ByTimer = strings.HasSuffix(os.Getenv("TRIGGER_UNIT"), ".timer")
	return s
}

// Run names the run this start is for, elects one node for it, runs it
// and records it.
func Run(env Env) int {
	if env.Log == nil {
		env.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if env.Started.IsZero() {
		env.Started = time.Now()
	}
	spec, err := jobspec.Read(env.SpecPath)
	if err != nil {
		return setupError(env, Record{Node: env.Node}, err)
	}
	sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone)
	if err != nil {
		return setupError(env, Record{Node: env.Node, Version: spec.Version}, fmt.Errorf("job spec schedule: %w", err))
	}
	req := readRequest(env.ManualDir, wire.UnitName(spec.Tenant, spec.ID))
	d := decideSlot(env.Now(), sched, spec, env.Start, req)
	rec := recordFor(env, spec, d)
	// A slot that may wait for the previous run says so from its first
	// record (Waiting), not only once it waits: the node agent stops a
	// runner for a disable, delete or change only while its record says
	// it may (unitmgr waitingCatchUp), and it sends that stop once. A
	// record that said "started, not waiting" through the stamp wait
	// (StampWait, seconds, while the previous run still goes) or the
	// election after the wait would be refused the stop, and the runner
	// would go on to run the slot under a spec that is gone. It says so
	// until the record says "ran"; SIGTERM is caught over the same span
	// (below), and a caught one runs nothing: the wait looks at env.stop
	// before each try of the lock, and runCommand once more just before
	// the command starts.
	rec.Waiting = d.Skip == "" && !d.CatchUp && overlapAction(spec.OverlapPolicy, d) == actWait
	if d.Skip != "" {
		env.Log.Info("not running: "+d.Reason, "run_key", d.Key)
		rec.Kind, rec.Reason = d.Skip, d.Reason
		return finish(env, rec, ExitSkip)
	}
	if d.CatchUp || overlapAction(spec.OverlapPolicy, d) == actWait {
		// (The same holds for a slot that may wait for the previous run,
		// buffer_one or cancel_previous: its record says Waiting.)
		// The node agent sends SIGTERM to a catch-up whose record says
		// "started" when the job is disabled, deleted or changed (it was
		// decided under the old spec), and so does a cancel of its run; the
		// node's shutdown stops it too. It is caught from before that
		// record until the record says "ran" (runCommand), not only during
		// the wait: a runner killed by it with its record at "started"
		// would be reported as the tenant's failure, and one that went on
		// would run a job that is gone.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(stop)
		env.stop = stop
	}
	// The local record comes first: if shared storage hangs until the
	// timeout, the outcome hook still reports this run, under its own key.
	// A node that cannot write it (the runtime dir's tmpfs full or read
	// only) does not contend: its hook would report nothing, hiding a run
	// that really happened, while another node can run and report the slot.
	if err := WriteRecord(env.RuntimeDir, rec); err != nil {
		env.Log.Error("cannot write the run record, not contending for the run (another node runs it)", "run_key", d.Key, "err", err)
		return ExitPlatformError
	}
	if why := clockForbidsRun(readClock(env), env.Now(), readBoot(env)); why != "" {
		// Not an outcome of the slot (see KindClockRefused): loud here and
		// in the agent, silent to the core. It exits ExitSkip, the status
		// of a run not run here: cron-outcome believes a silent record only
		// with that status (outcome.HoldToSystemd), and any other status
		// would make the refusal the tenant's failure.
		env.Log.Error("NOT RUNNING, this node's clock is wrong: "+why, "run_key", d.Key)
		rec.Kind, rec.Reason = KindClockRefused, "node "+env.Node+": "+why
		return finish(env, rec, ExitSkip)
	}
	if d.Wait > 0 {
		env.Log.Info("catch-up of a missed slot: waiting "+d.Wait.Round(time.Millisecond).String()+" before contending, to spread the catch-up runs", "run_key", d.Key)
		if !env.sleep(d.Wait) {
			// Stopped before it contended: nothing ran here, and another
			// node may still run the slot. Silent, like any late fire.
			rec.Kind, rec.Reason = KindLateFire, "stopped while waiting to catch up slot "+d.Slot.Format(time.RFC3339)
			return finish(env, rec, ExitSkip)
		}
	}
	return elect(env, spec, d, rec)
}

// sleep waits d, or less when a signal comes on env.stop first (false).
func (env Env) sleep(d time.Duration) bool {
	if env.Sleep != nil {
		return env.Sleep(d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-env.stop:
		return false
	}
}

// stopped reports whether a catch-up was told to stop since its wait
// (never for a runner that did not wait: env.stop is nil).
func (env Env) stopped() bool {
	select {
	case <-env.stop:
		return true
	default:
		return false
	}
}

func recordFor(env Env, spec jobspec.Spec, d decision) Record {
	trigger := d.Trigger
	if d.Recorded != "" {
		trigger = d.Recorded
	}
	if d.CatchUp {
		trigger = wire.TriggerCatchUp
	}
	return Record{Kind: KindStarted, Slot: d.Slot, Version: spec.Version, RunKey: d.Key, Trigger: string(trigger), Node: env.Node}
}

// elect takes the job's lock on shared storage: the holder runs, the
// others find out why they lost.
func elect(env Env, spec jobspec.Spec, d decision, rec Record) int {
	lock, err := openLock(spec.LockDir, spec.ID)
	if err != nil {
		return platformError(env, rec, err)
	}
	defer lock.Close()
	got, err := tryLock(lock)
	if err != nil {
		return platformError(env, rec, err)
	}
	if !got {
		return lost(env, spec, d, rec, lock)
	}
	return won(env, spec, d, rec)
}

// won: holding the lock, run d unless the stamps show it already ran or
// was decided a skip.
func won(env Env, spec jobspec.Spec, d decision, rec Record) int {
	if env.electing != nil {
		env.electing()
	}
	stampPath := filepath.Join(spec.LockDir, wire.SlotStampName(spec.ID))
	st, ok, warn, err := readStamp(stampPath, env.Now())
	if err != nil {
		return platformError(env, rec, fmt.Errorf("%w (not running: fail closed)", err))
	}
	// A late start that is not the one queued behind an overlapping run
	// is a late fire: nothing to run for the slot (a pending run-now
	// request still runs, below).
	lateFire := d.AfterOverrun && !afterOverrun(d, st, ok, env.Now())
	if lateFire {
		env.Log.Info("not running: "+d.Reason, "run_key", d.Key)
		if d.Fallback == nil {
			rec.Kind, rec.Reason = KindLateFire, d.Reason
			return finish(env, rec, ExitSkip)
		}
	}
	reading, boot := readClock(env), readBoot(env)
	clock, _ := judgeClock(reading, env.Now(), boot, ClockVerifiedFresh)
	// A verified node overwrote the stamp of a node whose clock was ahead,
	// which had run this slot early: it does not run again.
	var ranEarly *RanAhead
	if d.Trigger == wire.TriggerScheduled {
		ranEarly = st.ranAhead(d.Slot)
	}
	if ranEarly != nil {
		env.Log.Info("not running: slot "+d.Slot.Format(time.RFC3339)+" already ran ahead of time on node "+orUnknown(ranEarly.Node), "run_key", d.Key)
		if d.Fallback == nil {
			rec.Kind = KindContention
			return finish(env, rec, ExitSkip)
		}
	}
	var remembered *RanAhead
	if !ok && aheadOf(st, env.Now()) {
		v := judgeFutureStamp(st, spec.ID, reading, env.Now(), boot)
		if !v.Overwrite {
			return platformError(env, rec, errors.New(v.Reason))
		}
		if v.Remember {
			remembered = &RanAhead{Slot: st.Slot.UTC(), Node: st.Holder}
			warn = fmt.Sprintf("slot stamp names %s, more than %s ahead of this node's verified clock, written by node %s (its clock %s): overwritten; that slot ran there early and is remembered as run",
				st.Slot.UTC().Format(time.RFC3339), MaxSkew, orUnknown(st.Holder), orUnknown(st.Clock))
		}
	}
	// A writer that cannot vouch for its clock (unknown: no fresh reading)
	// may be running its slot early: it remembers its own slot as run, so
	// a verified node never runs that slot again, however many of this
	// writer's stamps came and went unseen.
	// (Not for a late fire that runs a request instead: its slot did not
	// run.)
	var own *RanAhead
	if d.Trigger == wire.TriggerScheduled && clock != clockVerified && !lateFire {
		own = &RanAhead{Slot: d.Slot, Node: env.Node}
	}
	ranAhead := mergeRanAhead(st.RanAhead, clock == clockVerified, env.Now(), remembered, own)
	if !ok {
		st = Stamp{} // corrupt or ahead: only its RanAhead is kept
	}
	if warn != "" {
		env.Log.Warn(warn, "run_key", d.Key)
		rec.Warning = warn
	}
	if d.Trigger == wire.TriggerScheduled && ((ok && st.covers(d)) || ranEarly != nil || lateFire) {
		if d.Fallback == nil {
			rec.Kind = KindContention
			return finish(env, rec, ExitSkip)
		}
		// The slot ran elsewhere; this start was the run-now request's.
		d = *d.Fallback
		rec = recordFor(env, spec, d)
		rec.Warning = warn
		if err := WriteRecord(env.RuntimeDir, rec); err != nil {
			// The record still names the slot another node ran: reported
			// as this node's platform error it would shadow that run's
			// real outcome. Leave no record and run nothing.
			env.Log.Error("cannot write the run record, not running the run-now request", "run_key", d.Key, "err", err)
			_ = os.Remove(filepath.Join(env.RuntimeDir, RecordFile))
			return 1
		}
	}
	if seen, err := markerExists(spec.LockDir, spec.ID, d); err != nil || seen {
		if err != nil {
			return platformError(env, rec, err)
		}
		rec.Kind = KindOverlapSeen
		return finish(env, rec, ExitSkip)
	}
	if d.Trigger == wire.TriggerManual {
		if done, err := claimRequest(spec, d); err != nil || done {
			if err != nil {
				return platformError(env, rec, err)
			}
			rec.Kind = KindContention
			return finish(env, rec, ExitSkip)
		}
	}
	lease := Stamp{Slot: st.Slot, Holder: env.Node, RunKey: d.Key, Heartbeat: env.Now().UTC(), Clock: clock.String(), RanAhead: ranAhead}
	if d.Trigger == wire.TriggerScheduled {
		lease.Slot = d.Slot
	}
	if err := writeStamp(stampPath, lease); err != nil {
		return platformError(env, rec, err)
	}
	if d.Trigger == wire.TriggerScheduled {
		if err := cleanMarkers(spec.LockDir, spec.ID, d.Slot, env.Now()); err != nil {
			env.Log.Warn("clean old skip markers", "err", err)
		}
	}
	return runCommand(env, spec, rec, stampPath, lease)
}

// readClock returns the agent's latest clock measurement, or nil when
// there is none to trust (missing, unreadable): the caller fails closed.
func readClock(env Env) *clockoffset.Reading {
	if env.ClockFile == "" {
		return nil
	}
	r, err := clockoffset.ReadFile(env.ClockFile)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) { // not measured yet is no news
			env.Log.Warn("clock offset unreadable", "err", err)
		}
		return nil
	}
	return &r
}

// readBoot returns the kernel's boot id and CLOCK_BOOTTIME, or nil when
// they cannot be read (the clock reading is then unknown).
func readBoot(env Env) *clockoffset.Boot {
	if env.Boot == nil {
		return nil
	}
	b, err := env.Boot()
	if err != nil {
		env.Log.Warn("boot time unreadable", "err", err)
		return nil
	}
	return &b
}

// claimRequest records a run-now request as started; done reports that it
// already was (a re-sent signal, an activity retry, another node).
func claimRequest(spec jobspec.Spec, d decision) (done bool, err error) {
	p := filepath.Join(spec.LockDir, wire.ManualStampName(spec.ID))
	ids, err := readDone(p)
	if err != nil {
		return false, fmt.Errorf("%w (not running: fail closed)", err)
	}
	if slices.Contains(ids, d.Request) {
		return true, nil
	}
	return false, writeDone(p, ids, d.Request)
}

// lost: another process holds the lock. One node per run decides a skip
// (it creates the run's marker) and reports it; the others stay silent.
func lost(env Env, spec jobspec.Spec, d decision, rec Record, lock *os.File) int {
	st, ok, got, err := waitForStamp(env, filepath.Join(spec.LockDir, wire.SlotStampName(spec.ID)), d, lock)
	if err != nil {
		return platformError(env, rec, err)
	}
	if got {
		// The holder let go without running d: decide under the lock,
		// as any winner does (the stamp and markers read there keep it
		// to one run).
		return won(env, spec, d, rec)
	}
	if d.Trigger == wire.TriggerScheduled && !d.AfterOverrun && noRunHolds(st, ok, d) &&
		overlapAction(spec.OverlapPolicy, d) != actWait { // a waiter waits for the lock, as behind a run
		// Still held at the end of the wait, by an election rather than
		// a run (a winner slow to write its stamp on slow storage): it
		// decides the slot. An overlap marker here would be false, and
		// would make that winner skip the slot (won reads the markers).
		env.Log.Info("lock held by another node's election past the stamp wait: the slot is its to decide", "run_key", d.Key)
		rec.Kind = KindContention
		return finish(env, rec, ExitSkip)
	}
	b := classifyBusy(d, st, ok, env.Now())
	if b.Kind == KindContention {
		rec.Kind = KindContention
		return finish(env, rec, ExitSkip)
	}
	if d.AfterOverrun {
		// The slot's waiter on another node (or a later run) holds the
		// lock: this late start is not the slot's run. A pending run-now
		// request is decided as it would be on a late fire.
		if d.Fallback == nil {
			rec.Kind, rec.Reason = KindLateFire, d.Reason
			return finish(env, rec, ExitSkip)
		}
		m := *d.Fallback
		mrec := recordFor(env, spec, m)
		if err := WriteRecord(env.RuntimeDir, mrec); err != nil {
			// The record names the slot: leave none rather than report it.
			env.Log.Error("cannot write the run record, not deciding the run-now request", "run_key", m.Key, "err", err)
			_ = os.Remove(filepath.Join(env.RuntimeDir, RecordFile))
			return 1
		}
		return lost(env, spec, m, mrec, lock)
	}
	if b.Kind == KindOverlap && overlapAction(spec.OverlapPolicy, d) == actWait {
		return waitForLock(env, spec, d, rec, lock)
	}
	return skipSlot(env, spec, d, rec, b)
}

// skipSlot decides d a skip for the reason b: the node that creates the
// run's marker reports it, every other stays silent.
func skipSlot(env Env, spec jobspec.Spec, d decision, rec Record, b busy) int {
	rec.Waiting = false
	first, err := createMarker(spec.LockDir, spec.ID, d)
	if err != nil {
		return platformError(env, rec, err)
	}
	if !first {
		rec.Kind = KindOverlapSeen
		return finish(env, rec, ExitSkip)
	}
	env.Log.Warn("not running: "+b.Reason, "run_key", d.Key)
	rec.Kind, rec.Reason = b.Kind, b.Reason
	if b.Kind == KindPlatformError {
		rec.Reason = "node " + env.Node + ": " + b.Reason
		return finish(env, rec, ExitPlatformError)
	}
	return finish(env, rec, ExitSkip)
}

// waitForLock is a buffer_one or cancel_previous slot that found the
// previous run still going: it tries the lock every OverlapPoll until it
// gets it (then it runs the slot like any winner: the stamp and the
// markers, read under the lock, keep it to one run), the stamp shows the
// slot run elsewhere (silent), the holder stops heart-beating (platform
// error, as without a policy), the deadline comes (the slot is skipped,
// overlap_skipped: a later slot is the buffered one now) or the runner is
// told to stop (silent, like a stopped catch-up). Several nodes may wait
// for the same slot; only one of them gets it. A cancel_previous holder
// stops itself when the slot comes (supersedeAt), so the wait is short.
func waitForLock(env Env, spec jobspec.Spec, d decision, rec Record, lock *os.File) int {
	deadline := waitDeadline(d.Slot, d.Next, env.Now(), spec.TimeoutSec)
	if !rec.Waiting { // Run marks it from the first record; this is a safety net
		rec.Waiting = true
		if err := WriteRecord(env.RuntimeDir, rec); err != nil {
			env.Log.Warn("cannot mark the run record waiting (a disable of the job will not stop this wait)", "run_key", d.Key, "err", err)
		}
	}
	env.Log.Info(fmt.Sprintf("the previous run is still running: waiting for it until %s (overlap_policy %s)",
		deadline.UTC().Format(time.RFC3339), spec.OverlapPolicy.OrSkip()), "run_key", d.Key)
	stampPath := filepath.Join(spec.LockDir, wire.SlotStampName(spec.ID))
	for {
		// Stopped first: a stop that came meanwhile (in the stamp wait or
		// the last poll) must not take the lock, nor write a stamp that
		// would keep another node's waiter from the slot.
		if env.stopped() {
			return stoppedWaiting(env, rec)
		}
		got, err := tryLock(lock)
		if err != nil {
			return platformError(env, rec, err)
		}
		if got {
			// The record keeps saying Waiting through the election (the
			// stamp and marker I/O on shared storage) until it says
			// "ran": the node agent may still stop it meanwhile.
			return won(env, spec, d, rec)
		}
		st, ok, _, err := readStamp(stampPath, env.Now())
		if err != nil {
			return platformError(env, rec, err)
		}
		switch nextWaitStep(d, st, ok, env.Now(), deadline, env.stopped()) {
		case waitCovered:
			rec.Kind, rec.Waiting = KindContention, false
			return finish(env, rec, ExitSkip)
		case waitHolder:
			return skipSlot(env, spec, d, rec, classifyBusy(d, st, ok, env.Now()))
		case waitGiveUp:
			return skipSlot(env, spec, d, rec, busy{Kind: KindOverlap, Reason: fmt.Sprintf(
				"the previous run was still running when slot %s gave up waiting, before the next slot %s (overlap_policy %s buffers only the newest slot)",
				d.Slot.Format(time.RFC3339), d.Next.UTC().Format(time.RFC3339), spec.OverlapPolicy.OrSkip())})
		case waitStopped:
			return stoppedWaiting(env, rec)
		}
		if !env.sleep(env.overlapPoll()) {
			return stoppedWaiting(env, rec)
		}
	}
}

// stoppedWaiting: a disable, delete, change or cancel of the job (or the
// node's shutdown) stopped a slot waiting for the previous run. Nothing
// ran here, and another node's waiter may still run the slot: silent.
func stoppedWaiting(env Env, rec Record) int {
	rec.Kind, rec.Reason, rec.Waiting = KindLateFire, "stopped while waiting for the previous run, slot "+rec.Slot.Format(time.RFC3339), false
	return finish(env, rec, ExitSkip)
}

// stopPoll is how often stopAt looks at the clock: every second, or every
// heartbeat when that is shorter (tests).
func (env Env) stopPoll() time.Duration {
	if env.Heartbeat > 0 && env.Heartbeat < time.Second {
		return env.Heartbeat
	}
	return time.Second
}

func (env Env) overlapPoll() time.Duration {
	if env.OverlapPoll > 0 {
		return env.OverlapPoll
	}
	return OverlapPoll
}

// waitForStamp polls the stamp until it shows d (the holder runs the same
// run and wrote its stamp right after taking the lock) or StampWait ends.
// While the stamp shows no run that overlaps d (noRunHolds), the holder is
// another election: a node electing for d, for a run-now request it had
// already served, or for a late fire, or one that failed or was killed
// before its stamp. It may let go without running d, so the lock is tried
// again on every poll (not by a runner told to stop, which takes no
// lock); got: it was taken, and the caller decides d under it. Without
// that, this node would decide an overlap for d with nothing running, and
// its marker would keep every later node from running it.
func waitForStamp(env Env, path string, d decision, lock *os.File) (st Stamp, ok, got bool, err error) {
	deadline := time.Now().Add(env.StampWait)
	for {
		st, ok, _, err = readStamp(path, env.Now())
		if err != nil {
			return st, ok, false, err
		}
		if ok && st.covers(d) {
			return st, ok, false, nil
		}
		if noRunHolds(st, ok, d) && !env.stopped() { // a stopped waiter takes no lock (waitForLock)
			got, err := tryLock(lock)
			if err != nil || got {
				return st, ok, got, err
			}
		}
		if time.Now().After(deadline) {
			return st, ok, false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// noRunHolds reports whether a stamp read while the lock is busy shows
// that no run overlapping d holds it: the last run let go of its lease
// before d's slot (a release's heartbeat is its time), or no run ever
// wrote a stamp. A release at or after the slot is the previous run
// ending during this slot's election: it overlapped the slot, which stays
// an overlap as before (its holder may still be draining output and
// exiting). A lease not released (a run under way, or one whose node
// stopped heart-beating), a stamp without a lease (written before leases)
// or one too far ahead to read (a fast node's) keep the lock's holder a
// run, as classifyBusy judges it.
func noRunHolds(st Stamp, ok bool, d decision) bool {
	if !ok {
		// No stamp at all, or a corrupt one (read as empty, which the
		// winner overwrites); a stamp ahead of this clock has its slot.
		return st.Slot.IsZero()
	}
	return st.Released && st.Heartbeat.Before(d.Slot)
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

// tryLock takes the job's lock without waiting: got is false while
// another runner holds it; err is any other failure (an evicted CephFS
// client, a hung mount's EIO), which is the platform's.
func tryLock(lock *os.File) (got bool, err error) {
	err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return false, nil
	default:
		return false, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
}

// release marks the lease as let go, once the command ended.
func release(env Env, path string, lease Stamp) {
	lease.Heartbeat, lease.Released = env.Now().UTC(), true
	if err := renewLease(env, path, lease); err != nil {
		env.Log.Warn("release lease", "err", err)
	}
}

// renewLease writes lease over the stamp only while the stamp still names
// this run: same holder, run key and slot. CephFS evicts an unresponsive
// client and gives its flock to another node; a client that reconnects
// (recover_session=clean) still runs its command, and writing its lease
// back would rewind the stamp below the slot the new holder stamped, so
// that slot could run again. Any other stamp is not this run's to touch:
// a later one (whatever this node's clock makes of it: one more than
// MaxSkew ahead is still another run's), a corrupt one, or none.
// (A narrow read-then-write race remains; the flock no longer guards it.)
func renewLease(env Env, path string, lease Stamp) error {
	st, _, _, err := readStamp(path, env.Now())
	if err != nil {
		return err
	}
	if st.Holder != lease.Holder || st.RunKey != lease.RunKey || !st.Slot.Equal(lease.Slot) {
		return fmt.Errorf("slot stamp no longer names this run (it names node %s, run %s, slot %s): lock lost, not writing",
			orUnknown(st.Holder), orUnknown(st.RunKey), st.Slot.UTC().Format(time.RFC3339))
	}
	return writeStamp(path, lease)
}

// startHeartbeat refreshes the lease in the stamp every env.Heartbeat (or
// at each of env.beats) until the returned stop is called (stop waits for
// a beat in progress), so other nodes can tell a
// live long run from a crashed holder whose flock CephFS keeps until it
// evicts the session.
func startHeartbeat(env Env, path string, lease Stamp) (stop func()) {
	var t *time.Ticker
	var tick <-chan time.Time // nil: never
	if env.beats == nil {
		if env.Heartbeat <= 0 {
			return func() {}
		}
		t = time.NewTicker(env.Heartbeat)
		tick = t.C
	}
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			var ack chan struct{}
			select {
			case <-quit:
				return
			case <-tick:
			case ack = <-env.beats: // nil: never
			}
			lease.Heartbeat = env.Now().UTC()
			if err := renewLease(env, path, lease); err != nil {
				env.Log.Warn("refresh lease", "err", err)
			}
			if ack != nil {
				close(ack)
			}
		}
	}()
	return func() {
		close(quit)
		<-stopped
		if t != nil {
			t.Stop()
		}
	}
}

// shellArgs is the shell's whole argv. The command is not in it: argv is
// /proc/PID/cmdline, which every local user can read (tenants put database
// passwords in cron commands), so the shell sources the command from the
// pipe on fd 3 instead. The dot builtin keeps what sh -c gives a one-line
// command: $0 is /bin/sh, exit ends the shell with its status, and the
// shell exits with the status of the command's last pipeline.
var shellArgs = []string{"/bin/sh", "-c", ". /dev/fd/" + strconv.Itoa(scriptFD)}

// scriptFD is the shell's descriptor of the command pipe: the first of
// exec.Cmd.ExtraFiles.
const scriptFD = 3

// scriptPrefix closes fd 3 before the command runs, on the command's own
// line so error messages keep saying line 1: the dot builtin has opened
// the pipe again on a close-on-exec descriptor of its own, and the
// command's programs (a daemon it starts, say) must not inherit the pipe.
const scriptPrefix = "exec 3<&-; "

// commandPipe returns the read end of a pipe that holds script and is
// already closed for writing, so the shell reads it to the end and never
// blocks: a command is at most 4096 bytes (jobspec), far below the pipe's
// capacity, so the write cannot block either.
func commandPipe(script string) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("command pipe: %w", err)
	}
	_, err = io.WriteString(w, script)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("write the command into its pipe: %w", err)
	}
	return r, nil
}

// runCommand runs the tenant's command with /bin/sh in the working
// directory (the command comes in on a pipe, see shellArgs), forwarding
// SIGTERM, and records how it ended.
func runCommand(env Env, spec jobspec.Spec, rec Record, stampPath string, lease Stamp) int {
	cmd := exec.Command(shellArgs[0], shellArgs[1:]...)
	cmd.Dir = spec.Dir()
	cmd.Stdin = nil // /dev/null: the command is on fd 3, never on stdin
	jobVars, dropped := jobEnv(spec.Environment)
	for _, name := range dropped {
		env.Log.Warn("job spec sets a variable the API refuses, not passing it to the command", "name", name, "run_key", rec.RunKey)
	}
	cmd.Env = commandEnv(os.Environ(), jobVars, runEnv(spec, rec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // one group to signal and measure
	// The handler comes before the record says "ran": the node agent
	// signals a runner (a cancel) only once its record says so (or, for a
	// catch-up, while env.stop catches it), and a runner must not die of
	// that signal between its record and its command's start, leaving a
	// record without an end.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs) // caught to the end: the record must be written
	if env.stopped() {
		// A catch-up stopped after its wait, while it elected: it won,
		// but runs nothing. The stamp it wrote keeps the slot from
		// running elsewhere, which is what a disable or delete wants; a
		// node shutting down at this moment loses the slot.
		release(env, stampPath, lease)
		rec.Kind, rec.Reason = KindLateFire, "stopped before its command started (a catch-up or a wait for the previous run), slot "+rec.Slot.Format(time.RFC3339)
		return finish(env, rec, ExitSkip)
	}
	started := env.Now().UTC()
	rec.Kind, rec.StartedAt, rec.Waiting = KindRan, &started, false
	// A record before the command starts: if the run is killed (timeout,
	// OOM), the outcome hook still knows the slot and the start. Without
	// it the hook would report the run as a platform error from the
	// "started" record, hiding how the command really ended: do not start
	// it (the run is reported as the platform error it is).
	if err := WriteRecord(env.RuntimeDir, rec); err != nil {
		env.Log.Error("cannot write the run record, not starting the command", "run_key", rec.RunKey, "err", err)
		release(env, stampPath, lease)
		return ExitPlatformError
	}
	script, err := commandPipe(scriptPrefix + spec.Command)
	if err != nil {
		// A pipe the node cannot make (descriptors or pipe pages used up)
		// is the node's fault, not the tenant's.
		release(env, stampPath, lease)
		return platformError(env, rec, err)
	}
	// One pipe for stdout and stderr keeps their lines in the order the
	// command wrote them, as the journal stream they shared did.
	outR, outW, err := os.Pipe()
	if err != nil {
		script.Close()
		release(env, stampPath, lease)
		return platformError(env, rec, fmt.Errorf("output pipe: %w", err))
	}
	defer outR.Close()
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{script} // fd 3 == scriptFD
	if env.stopped() {
		// A stop that came while the record still said "started" (the
		// node agent read it so and signalled), after the check above:
		// the last look before the command starts, so it runs nothing.
		// (One arriving after this look is forwarded to the command as
		// soon as it starts, and the agent's cancel marker, which names
		// this run, reports it cancelled.)
		script.Close()
		outW.Close()
		release(env, stampPath, lease)
		rec.Kind, rec.StartedAt, rec.Reason = KindLateFire, nil, "stopped before its command started (a catch-up or a wait for the previous run), slot "+rec.Slot.Format(time.RFC3339)
		return finish(env, rec, ExitSkip)
	}
	err = cmd.Start()
	// The child has its own copies; the runner's must not keep the pipes
	// alive (the output pipe ends when the command's last holder exits).
	script.Close()
	outW.Close()
	if err != nil {
		release(env, stampPath, lease)
		return setupError(env, rec, fmt.Errorf("start command: %w", err))
	}
	output := newOutputCopy(env.output(), env.outputLimits())
	go output.copyFrom(outR)
	// A SIGTERM that came since the record said "ran" waits in sigs and
	// reaches the command's group now.
	reaped := make(chan struct{})
	go forwardSignals(sigs, cmd.Process.Pid, env.killGrace(), reaped)
	// Stops the runner decides itself: the job's timeout, counted from the
	// command's start when the unit's start timeout also covers a wait
	// (WaitSec), and the next slot of a cancel_previous job. Each stops
	// the command as a SIGTERM would (forwardSignals: the group and the
	// command itself, then SIGKILL after the grace).
	var cause atomic.Int32
	if spec.WaitSec > 0 && spec.TimeoutSec > 0 {
		// A duration, so by the monotonic clock: no clock step moves it.
		go stopAt(time.Now, env.stopPoll(), time.Now().Add(time.Duration(spec.TimeoutSec)*time.Second), stopTimeout, &cause, sigs, reaped)
	}
	// A run-now or backfill run is superseded by the first slot after its
	// command's start (its request may have waited past a slot; a
	// backfill's slot is long past, and the slot after it would stop it at
	// once); a slot's run (scheduled, catch-up, retry) by the slot after
	// its own.
	supersedeFrom := rec.Slot
	if rec.Trigger == string(wire.TriggerManual) || rec.Trigger == string(wire.TriggerBackfill) {
		supersedeFrom = started
	}
	if sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone); err == nil {
		if at := supersedeAt(spec.OverlapPolicy, sched, supersedeFrom); !at.IsZero() {
			go stopAt(env.Now, env.stopPoll(), at, stopSuperseded, &cause, sigs, reaped)
		}
	}
	done := make(chan struct{})
	stopBeat := startHeartbeat(env, stampPath, lease)
	var oom <-chan bool
	if spec.MemoryMaxMB > 0 && !env.KernelMemoryLimit {
		oom = watchMemory(env.MemoryCgroup, cmd.Process.Pid, int64(spec.MemoryMaxMB)<<20, done)
	}
	err = cmd.Wait()
	// No forwarding once the command is reaped: its group id may be
	// reused, and the stamp I/O below may take long on shared storage.
	close(reaped)
	close(done)
	// The command's end: the lock's release below is not its time.
	finished := env.Now().UTC()
	timeout := time.Duration(spec.TimeoutSec+spec.WaitSec) * time.Second // the unit's TimeoutStartSec
	releaseWithin(env, stopBeat, stampPath, lease, timeout)
	if oom != nil {
		rec.OOMKilled = <-oom // the watch answers as soon as done is closed
	}
	rec.FinishedAt = &finished
	// After the finish: the drain (a child holding the pipe) is not the
	// command's time.
	tail, truncated, droppedBytes := output.stop(outR, func(t time.Time) time.Time {
		return drainBound(t, env.Started, timeout)
	})
	rec.OutputTail, rec.OutputTruncated, rec.OutputDroppedBytes = &tail, truncated, droppedBytes
	rec.CPUSeconds, rec.PeakMemoryBytes = usage(cmd.ProcessState)
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
	switch cause.Load() {
	case stopTimeout:
		rec.TimedOut = true
		env.Log.Warn("command stopped at the job's timeout", "run_key", rec.RunKey, "timeout_seconds", spec.TimeoutSec)
	case stopSuperseded:
		if sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone); err == nil {
			next := sched.Next(supersedeFrom).UTC()
			rec.SupersededBy = &next
		}
		env.Log.Info("command stopped: the next slot came (overlap_policy cancel_previous)", "run_key", rec.RunKey)
	}
	if code == ExitSkip || code == ExitPlatformError {
		// The command's own 75 must not read as lock contention, nor its
		// 76 as a platform error.
		code = 1
	}
	return finish(env, rec, code)
}

// Why the runner itself stopped the command (stopAt).
const (
	stopNone int32 = iota
	stopTimeout
	stopSuperseded
)

// stopAt asks for the command's stop (a SIGTERM on sigs, which
// forwardSignals passes to its group and follows with SIGKILL) at at, by
// now, unless the command is reaped first. The first cause wins. It looks
// at the clock at least every poll, so a wall clock stepped meanwhile
// moves a stop at a slot with it.
func stopAt(now func() time.Time, poll time.Duration, at time.Time, why int32, cause *atomic.Int32, sigs chan<- os.Signal, reaped <-chan struct{}) {
	for left := at.Sub(now()); left > 0; left = at.Sub(now()) {
		t := time.NewTimer(min(left, poll))
		select {
		case <-reaped:
			t.Stop()
			return
		case <-t.C:
		}
	}
	if !cause.CompareAndSwap(stopNone, why) {
		return
	}
	select {
	case sigs <- syscall.SIGTERM:
	default: // a signal is pending already: it stops the command the same way
	}
}

// releaseWithin stops the lease's heartbeat and releases the lease (in
// that order, so no late beat overwrites the release), waiting for them
// until timeoutMargin before the unit's start timeout (drainBound) but at
// least releaseFloor (for ever when timeout is 0, an older agent's spec). Shared
// storage that hangs after the command has ended (an MDS failover, a
// client eviction) would otherwise hold the runner until systemd's
// timeout kills it, before it writes the command's result: the hook would
// report the tenant's timeout for a command that ended in time. Past the
// bound the runner goes on without the release, which is left behind
// (the process ends soon after): the lease then reads as a holder that
// stopped heart-beating once its TTL has passed, as after a crash.
func releaseWithin(env Env, stopBeat func(), stampPath string, lease Stamp, timeout time.Duration) {
	released := make(chan struct{})
	go func() {
		defer close(released)
		stopBeat()
		release(env, stampPath, lease)
	}()
	if timeout <= 0 {
		<-released
		return
	}
	// At least releaseFloor: a command that ended within timeoutMargin of
	// the unit's timeout (or a timeout under it) finds the bound passed,
	// and a runner that did not wait at all would exit before a release on
	// healthy storage had written, leaving its lease to read as a run
	// under way to the next slot's losers.
	t := time.NewTimer(max(time.Until(drainBound(env.Started.Add(timeout), env.Started, timeout)), releaseFloor))
	defer t.Stop()
	select {
	case <-released:
	case <-t.C:
		env.Log.Warn("releasing the job's lock on shared storage did not end in time: the run ends without it (shared storage hung?)",
			"run_key", lease.RunKey, "stamp", stampPath)
	}
}

// releaseFloor is the least releaseWithin waits for the release: more
// than a healthy shared storage takes to write the stamp. A release
// slower than that near the unit's timeout may still be cut by systemd's
// kill (the tenant's timeout, as before releaseWithin).
const releaseFloor = 2 * time.Second

// timeoutMargin is how long before the unit's start timeout the runner
// stops waiting on output: systemd's timeout runs from before the
// runner's own start (fork, credentials, exec), and the record must still
// be written after the wait.
const timeoutMargin = 2 * time.Second

// drainBound is the latest the runner may wait on the output instead of
// want: never within timeoutMargin of the unit's start timeout (timeout
// after started; 0: an older agent's spec, unknown). A command that ended
// in time must not become a timeout, charged to the tenant, because the
// runner waited on a pipe a background process held open.
func drainBound(want, started time.Time, timeout time.Duration) time.Time {
	if timeout <= 0 {
		return want
	}
	if limit := started.Add(timeout - timeoutMargin); want.After(limit) {
		return limit
	}
	return want
}

// KillGrace is how long a command may take to end after the runner passed
// it SIGTERM (a cancel, a stop) before its whole group gets SIGKILL: the
// unit's TimeoutStopSec, so a cancel ends a run as surely as systemd's own
// stop does.
const KillGrace = 10 * time.Second

func (env Env) output() io.Writer {
	if env.Output != nil {
		return env.Output
	}
	return os.Stdout
}

func (env Env) outputLimits() OutputLimits {
	if env.OutputLimits == (OutputLimits{}) {
		return DefaultOutputLimits
	}
	return env.OutputLimits
}

func (env Env) killGrace() time.Duration {
	if env.KillGrace > 0 {
		return env.KillGrace
	}
	return KillGrace
}

// forwardSignals passes each signal the runner gets to the command's
// process group and to the command itself, and kills both grace after
// the first one; it ends when the command has been reaped (later signals
// stay caught, unused). pid is the command, the leader of the group it
// was started in (Setpgid), so its pid is that group's id.
//
// The group alone is not enough: the command runs in the runner's
// session and may move itself into another group of it, the runner's own
// included (setpgid, e.g. perl's setpgrp(0, getpgrp(getppid()))), after
// which no signal to its old group reaches it, neither the job's timeout
// (stopAt) nor a cancel_previous stop, and only the unit's start timeout
// (timeout + wait) would end it. The runner's direct child can always be
// signalled by its pid, whatever its group (the pid stays its own until
// the reap, and reaped is closed right after it). What else it left
// behind in other groups ends with the runner: the unit's KillMode
// (systemd's default, control-group) kills all that remains in the
// service's cgroup, which no process of it can leave.
func forwardSignals(sigs <-chan os.Signal, pid int, grace time.Duration, reaped <-chan struct{}) {
	var kill <-chan time.Time
	for {
		select {
		case <-reaped:
			return
		case s := <-sigs:
			signalCommand(pid, s.(syscall.Signal))
			if kill == nil {
				t := time.NewTimer(grace)
				defer t.Stop()
				kill = t.C
			}
		case <-kill:
			signalCommand(pid, syscall.SIGKILL)
			kill = make(chan time.Time) // once
		}
	}
}

// signalCommand sends sig to the command's process group and to the
// command itself (forwardSignals says why both). Errors are ignored: the
// group may be empty, the command exiting.
func signalCommand(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
	_ = syscall.Kill(pid, sig)
}

// usage is what the command used: user and system CPU seconds, and the
// peak resident set (Linux reports ru_maxrss in KiB) of the largest
// process among it and the descendants it waited for. Zero when unknown.
func usage(ps *os.ProcessState) (cpuSeconds float64, peakBytes int64) {
	if ps == nil {
		return 0, 0
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu.Seconds(), ru.Maxrss * 1024
}

// runEnv tells the command which run it is: a script can make itself
// idempotent per run with HOSTCRON_RUN_KEY (or per slot with
// HOSTCRON_SLOT, the fire time it stands for, which may lie a few seconds
// before now, or up to the catch-up window for a catch-up; a run-now's
// request time; a backfill's past slot), HOSTCRON_TRIGGER says why it
// started (scheduled, manual, catchup, backfill, retry) and HOSTCRON_ATTEMPT which attempt it is;
// HOSTCRON_TENANT and HOSTCRON_CRON_JOB_ID name its job. Every value is
// the runner's own (its spec's, its decision's), never the tenant's text.
func runEnv(spec jobspec.Spec, rec Record) []string {
	return []string{
		"HOSTCRON_TENANT=" + spec.Tenant,
		"HOSTCRON_CRON_JOB_ID=" + spec.ID,
		"HOSTCRON_RUN_KEY=" + rec.RunKey,
		"HOSTCRON_SLOT=" + rec.Slot.UTC().Format(time.RFC3339),
		"HOSTCRON_TRIGGER=" + rec.Trigger,
		"HOSTCRON_ATTEMPT=" + strconv.Itoa(attemptOf(rec.RunKey)),
	}
}

// attemptOf is the attempt of the run keyed runKey: a retry's, 1 for any
// other run.
func attemptOf(runKey string) int {
	k, err := runkey.Parse(runKey)
	if err != nil {
		return 1
	}
	return k.AttemptNumber()
}

// childEnv is the inherited environment without hostcron's plumbing, and
// without any HOSTCRON_ variable it inherited: runEnv's are the only ones.
func childEnv(inherited []string) []string {
	var out []string
	for _, kv := range inherited {
		if strings.HasPrefix(kv, "CREDENTIALS_DIRECTORY=") || strings.HasPrefix(kv, "RUNTIME_DIRECTORY=") ||
			strings.HasPrefix(kv, "HOSTCRON_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// jobEnv is the job's variables as NAME=value in name order, without those
// the API refuses (dropped, by name): a spec written by an older or
// compromised core must not inject LD_PRELOAD or a HOSTCRON_ variable.
// Each variable is held to jobspec.ValidateEnvVar; the map's size bounds
// are not applied (they protect the core's payloads, not the run).
func jobEnv(vars map[string]string) (kept []string, dropped []string) {
	for _, name := range jobspec.SortedEnvNames(vars) {
		if err := jobspec.ValidateEnvVar(name, vars[name]); err != nil {
			dropped = append(dropped, name)
			continue
		}
		kept = append(kept, name+"="+vars[name])
	}
	return kept, dropped
}

// commandEnv is the command's environment: the inherited one (childEnv),
// then the job's variables, then the runner's HOSTCRON_ ones. A name set
// twice keeps its last value (a job's PATH or HOME wins over the
// inherited one; nothing wins over HOSTCRON_), and appears once, so no
// program can read the other value.
func commandEnv(inherited, job, run []string) []string {
	all := append(append(childEnv(inherited), job...), run...)
	last := map[string]int{}
	for i, kv := range all {
		name, _, _ := strings.Cut(kv, "=")
		last[name] = i
	}
	out := make([]string, 0, len(last))
	for i, kv := range all {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i {
			out = append(out, kv)
		}
	}
	return out
}

func setupError(env Env, rec Record, err error) int {
	env.Log.Error("command not started: "+err.Error(), "run_key", rec.RunKey)
	rec.Kind, rec.Reason = KindSetupError, err.Error()
	return finish(env, rec, 1)
}

// platformError records a failure of shared storage or the node, naming
// the node: the platform's fault, not the tenant's.
func platformError(env Env, rec Record, err error) int {
	env.Log.Error("platform error, not running: "+err.Error(), "run_key", rec.RunKey)
	rec.Kind, rec.Reason = KindPlatformError, "node "+env.Node+": "+err.Error()
	return finish(env, rec, ExitPlatformError)
}

func finish(env Env, rec Record, code int) int {
	if rec.Kind != KindStarted {
		rec.Waiting = false // a final record waits for nothing
	}
	if err := WriteRecord(env.RuntimeDir, rec); err != nil {
		env.Log.Error("write run record", "err", err)
	}
	return code
}
