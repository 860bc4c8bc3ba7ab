// Package outcome turns the end of a cron service into a report for the
// core API, and delivers it: at once if the API answers, else through a
// spool on disk that the node agent drains.
package outcome

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// Service is what systemd tells ExecStopPost about the run.
type Service struct {
	Result     string // $SERVICE_RESULT: success, exit-code, signal, core-dump, timeout, oom-kill, ...
	ExitCode   string // $EXIT_CODE: exited, killed, dumped
	ExitStatus string // $EXIT_STATUS: a number or a signal name
	OOMKills   int    // oom_kill count of the unit's cgroup, as a second witness
	// LimitOOMs is the cgroup's own "oom" count: how often the job's
	// memory limit (MemoryMax=) was reached with nothing left to reclaim.
	// An OOM kill without it came from outside the job: the node ran out
	// of memory and the kernel's global OOM killer chose the job.
	LimitOOMs int
}

// ServiceFromEnv reads systemd's variables and the cgroup's OOM counters.
func ServiceFromEnv() Service {
	svc := Service{Result: os.Getenv("SERVICE_RESULT"), ExitCode: os.Getenv("EXIT_CODE"), ExitStatus: os.Getenv("EXIT_STATUS")}
	svc.LimitOOMs, svc.OOMKills = cgroupOOMs()
	return svc
}

// Classify decides what to report, from a record held to systemd's view
// first (HoldToSystemd). It returns silent=true when another
// node reports the run (lock contention, an overlap another node decided)
// or there was no run (a late fire, a slot before NotBefore).
func Classify(svc Service, rec runner.Record, haveRecord bool, now time.Time) (r wire.Outcome, silent bool) {
	if haveRecord {
		rec, _ = HoldToSystemd(svc, rec) // the caller logs the contradiction
	}
	if haveRecord && runner.Silent(rec.Kind) {
		return wire.Outcome{}, true
	}
	skipped := svc.Result == "success" && svc.ExitStatus == strconv.Itoa(runner.ExitSkip)
	if skipped && (!haveRecord || rec.Kind == runner.KindStarted) {
		// A skip whose record was lost, or whose final record could not
		// be written over "started": nothing ran here, and a platform
		// error under the run's key would shadow the real outcome of the
		// node that ran it.
		return wire.Outcome{}, true
	}
	r = wire.Outcome{RunKey: rec.RunKey, Version: rec.Version, ScheduledAt: rec.Slot, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt,
		ExitCode: rec.ExitCode}
	if wire.Trigger(rec.Trigger) == wire.TriggerCatchUp {
		// The key says scheduled; only the trigger tells a catch-up
		// (validateIdentity allows it for a scheduled key alone).
		r.Trigger = wire.TriggerCatchUp
	}
	if r.FinishedAt == nil && r.StartedAt != nil {
		end := now.UTC()
		r.FinishedAt = &end
	}
	if r.StartedAt != nil && r.FinishedAt != nil && r.FinishedAt.Before(*r.StartedAt) {
		// The node's clock was stepped back during the run (the runner's
		// finish, or the hook's now for a runner killed before it wrote
		// one). The core refuses a finish before the start for good, and
		// the run would be swept lost: report no duration instead.
		end := *r.StartedAt
		r.FinishedAt = &end
	}
	if rec.Signal != "" {
		sig := rec.Signal
		r.Signal = &sig
	}
	r.CPUSeconds, r.PeakMemoryBytes = usageOf(rec)
	r.OutputTail, r.OutputTruncated, r.OutputDroppedBytes = outputOf(rec)
	switch {
	case rec.Kind == runner.KindPlatformError:
		r.Result, r.FailureReason = wire.ResultPlatformError, rec.Reason
	case haveRecord && rec.Kind == runner.KindStarted && svc.Result == "timeout":
		// Killed before the election ended: shared storage hung.
		r.Result, r.FailureReason = wire.ResultPlatformError, nodeReason(rec, "timed out before the command started (shared storage hung?)")
	case haveRecord && rec.Kind == runner.KindStarted && runnerExited(svc, runner.ExitPlatformError):
		// The runner decided a platform error and could not write it over
		// "started" (its exit status says so; the tenant cannot set it).
		r.Result, r.FailureReason = wire.ResultPlatformError, nodeReason(rec, fmt.Sprintf("runner ended (%s %s %s) before the command started", svc.Result, svc.ExitCode, svc.ExitStatus))
	case haveRecord && rec.Kind == runner.KindStarted && rec.Waiting && runnerKilled(svc):
		// Killed while it waited for the previous run (overlap_policy):
		// no command of its ran, and another node's waiter may run the
		// slot, whose result then replaces this one (a signal, the
		// tenant's failure, would shadow it).
		r.Result, r.FailureReason = wire.ResultPlatformError, nodeReason(rec, fmt.Sprintf("runner killed by %s while waiting for the previous run", signalName(svc.ExitStatus)))
	case haveRecord && rec.Kind == runner.KindStarted && runnerKilled(svc):
		// A runner killed by a signal other than the timeout's: its own
		// command can do that (kill $PPID needs only the same uid) after
		// rewriting the record to "started", so this is not evidence of a
		// platform fault. It is the run's signal, the tenant's failure.
		r.Result, r.FailureReason = wire.ResultSignal, fmt.Sprintf("runner killed by %s before its record was final", signalName(svc.ExitStatus))
		sig := signalName(svc.ExitStatus)
		r.Signal = &sig
	case svc.Result == "timeout" || (rec.Kind == runner.KindRan && rec.TimedOut):
		// TimedOut: the runner stopped the command at the timeout, counted
		// from the command's start (a unit whose start timeout also covers
		// a wait before it, jobspec.Spec.WaitSec).
		r.Result, r.FailureReason = wire.ResultTimeout, "killed after the job's timeout"
	case svc.OOMKills > 0 && svc.LimitOOMs == 0 && !rec.OOMKilled && svc.Result != "success":
		// The kernel killed for memory, but the job never reached its own
		// limit: the node ran out (other sites, other jobs), and the
		// global OOM killer chose this run. The platform's.
		r.Result, r.FailureReason = wire.ResultPlatformError, nodeReason(rec, "killed by the node's OOM killer: the node ran out of memory while the job stayed within its own limit")
	case svc.Result == "oom-kill" || rec.OOMKilled || (svc.OOMKills > 0 && svc.Result != "success"):
		r.Result, r.FailureReason = wire.ResultOOM, "killed for exceeding the job's memory limit"
	case rec.Kind == runner.KindOverlap:
		r.Result, r.FailureReason = wire.ResultOverlapSkipped, "the previous run was still running"
	case rec.Kind == runner.KindSetupError:
		r.Result, r.FailureReason = wire.ResultFailed, rec.Reason
	case runnerKilled(svc) && svc.Result == "success":
		// systemd calls a main process killed by SIGHUP, SIGINT, SIGTERM
		// or SIGPIPE a clean exit for some service types: a killed runner
		// never vouches for a success.
		sig := signalName(svc.ExitStatus)
		r.Result, r.Signal, r.FailureReason = wire.ResultSignal, &sig, "runner killed by "+sig
	case svc.Result == "success":
		r.Result = wire.ResultSuccess
	case rec.Signal != "":
		r.Result, r.FailureReason = wire.ResultSignal, "killed by "+rec.Signal
	case svc.Result == "signal" || svc.Result == "core-dump":
		sig := signalName(svc.ExitStatus)
		r.Result, r.Signal, r.FailureReason = wire.ResultSignal, &sig, "killed by "+sig
	case svc.Result == "exit-code" && haveRecord && rec.Kind == runner.KindRan:
		r.Result = wire.ResultExitCode
		if r.ExitCode != nil {
			r.FailureReason = fmt.Sprintf("exited with status %d", *r.ExitCode)
		}
	default:
		r.Result = wire.ResultFailed
		r.FailureReason = fmt.Sprintf("service result %q (%s %s) before the command ran", svc.Result, svc.ExitCode, svc.ExitStatus)
	}
	return superseded(r, rec), false
}

// superseded turns the failure of a run that the next slot stopped
// (overlap_policy cancel_previous: the runner's SupersededBy, held to the
// spec by ReadRecord) into cancelled: it ended the way the stop ends it,
// which is the policy, not the tenant's failure. A run that succeeded
// before the stop reached it, or a platform error, keeps its result, and
// so do a timeout and an OOM kill: systemd's own (its start timeout, the
// kernel's MemoryMax) or the runner's (TimedOut, its memory watch) ended
// the run whatever the record says of a stop (a command that escaped the
// stop runs into them), and the record is the tenant's to rewrite, so
// SupersededBy must not turn them into a cancel.
func superseded(r wire.Outcome, rec runner.Record) wire.Outcome {
	if rec.Kind != runner.KindRan || rec.SupersededBy == nil || !r.Result.IsFailure() {
		return r
	}
	switch r.Result {
	case wire.ResultPlatformError, wire.ResultTimeout, wire.ResultOOM:
		return r
	}
	r.Result = wire.ResultCancelled
	r.FailureReason = "stopped when slot " + rec.SupersededBy.UTC().Format(time.RFC3339) + " came (overlap_policy cancel_previous)"
	return r
}

// usageOf is what a run of the command used, as the runner measured it;
// nil for a record of no finished command (or nothing measured). Bounded
// so a rewritten record cannot send the core a value it refuses.
func usageOf(rec runner.Record) (cpu *float64, peak *int64) {
	if rec.Kind != runner.KindRan || rec.FinishedAt == nil {
		return nil, nil
	}
	if c := rec.CPUSeconds; c > 0 && c <= wire.MaxCPUSeconds {
		cpu = &c
	}
	if p := rec.PeakMemoryBytes; p > 0 && p <= wire.MaxPeakMemoryBytes {
		peak = &p
	}
	return cpu, peak
}

// outputOf is the end of a finished command's output and how much of it
// the journal lost, as the runner recorded them; nothing for a record of
// no finished command. The tenant can rewrite the record, so the tail is
// made what the runner would have written (wire.OutputTail: the last
// MaxOutputTail bytes of UTF-8 without NUL, whatever its size or bytes)
// and the count is held to its bounds.
func outputOf(rec runner.Record) (tail *string, truncated bool, droppedBytes int64) {
	if rec.Kind != runner.KindRan || rec.FinishedAt == nil || rec.OutputTail == nil {
		return nil, false, 0
	}
	t := wire.OutputTail([]byte(*rec.OutputTail), false)
	droppedBytes = min(max(rec.OutputDroppedBytes, 0), wire.MaxOutputDroppedBytes)
	return &t, rec.OutputTruncated || droppedBytes > 0, droppedBytes
}

func nodeReason(rec runner.Record, why string) string {
	if rec.Node == "" {
		return why
	}
	return "node " + rec.Node + ": " + why
}

// cgroupOOMs reads the OOM counters of the cgroup this process runs in;
// ExecStopPost runs in the service's own cgroup. Zeros when they cannot
// be read (no memory controller: the runner's watch enforces the limit).
func cgroupOOMs() (limitOOMs, oomKills int) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			ev, err := os.ReadFile("/sys/fs/cgroup" + path + "/memory.events")
			if err != nil {
				return 0, 0
			}
			return parseMemoryEvents(string(ev))
		}
	}
	return 0, 0
}

// parseMemoryEvents reads "oom" and "oom_kill" from a cgroup v2
// memory.events. The kernel counts "oom" in the cgroup whose limit was
// reached (and its ancestors), "oom_kill" in the cgroup of the process
// any OOM killer chose, the global one included.
func parseMemoryEvents(text string) (limitOOMs, oomKills int) {
	for _, l := range strings.Split(text, "\n") {
		name, v, _ := strings.Cut(l, " ")
		n, _ := strconv.Atoi(v)
		switch name {
		case "oom":
			limitOOMs = n
		case "oom_kill":
			oomKills = n
		}
	}
	return limitOOMs, oomKills
}

// runnerExited reports whether the runner (the unit's main process) exited
// with status.
func runnerExited(svc Service, status int) bool {
	return svc.ExitCode == "exited" && svc.ExitStatus == strconv.Itoa(status)
}

// runnerKilled reports whether the runner died of a signal (systemd's
// $EXIT_CODE killed or dumped).
func runnerKilled(svc Service) bool {
	return svc.ExitCode == "killed" || svc.ExitCode == "dumped"
}

// signalName spells systemd's $EXIT_STATUS signal ("KILL") as "SIGKILL".
func signalName(status string) string {
	return "SIG" + strings.TrimPrefix(status, "SIG")
}
