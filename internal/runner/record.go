// Package runner is the ExecStart of every cron service: it names the slot
// the timer fired for, elects one node per slot through a lock and a slot
// stamp on shared storage, runs the tenant's command and leaves a record
// for the outcome hook.
package runner

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
)

// Kinds of record.
const (
	KindStarted    = "started"     // decided the run, before touching shared storage; never a final kind
	KindRan        = "ran"         // this node ran the command
	KindContention = "contention"  // another node runs or ran this slot: silent
	KindOverlap    = "overlap"     // the previous slot's run still runs: reported as overlap_skipped
	KindSetupError = "setup_error" // the runner could not start the command: reported as failed
	// KindOverlapSeen: another node already decided this slot an overlap
	// skip and reports it: silent.
	KindOverlapSeen = "overlap_seen"
	// KindLateFire: the service started outside the slot's fire window (a
	// restarted timer, a start queued behind an overrun): silent.
	KindLateFire = "late_fire"
	// KindNotBefore: the slot lies before the job's NotBefore: silent.
	KindNotBefore = "not_before"
	// KindClockRefused: the agent measured this node's clock more than
	// MaxSkew off, so the node did not contend for the slot (the slot it
	// names is not the true one). Not an outcome of any slot: its key may
	// be a slot minutes ahead (refused by the core) or a correct node's
	// (whose record it must never replace). Silent (exit ExitSkip); the
	// journal and the agent (log, `node-agent state`) say it loudly.
	KindClockRefused = "clock_refused"
	// KindPlatformError: shared storage or the node failed the run:
	// reported as platform_error, never counted against the tenant.
	KindPlatformError = "platform_error"
)

// Silent reports whether a record of kind k is reported by no one: the
// run belongs to another node, or is no run at all.
func Silent(k string) bool {
	return k == KindContention || k == KindOverlapSeen || k == KindLateFire || k == KindNotBefore || k == KindClockRefused
}

// ExitSkip is the exit status of a run that did not run the command; the
// unit's SuccessExitStatus=75 makes it a success for systemd.
const ExitSkip = 75

// ExitPlatformError is the exit status of a run the runner ended as a
// platform error (shared storage or the node failed it). cron-outcome
// believes a record's platform_error only when systemd saw the runner exit
// with it: the record is the tenant's to rewrite, the runner's exit status
// is not. A command's own 76 is reported as its exit code, and the runner
// exits 1 for it.
const ExitPlatformError = 76

// Record is what the runner leaves for cron-outcome.
type Record struct {
	Kind       string     `json:"kind"`
	RunKey     string     `json:"run_key"`
	Slot       time.Time  `json:"slot"`
	Version    int64      `json:"version"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	ExitCode   *int       `json:"exit_code,omitempty"`
	Signal     string     `json:"signal,omitempty"`
	OOMKilled  bool       `json:"oom_killed,omitempty"` // killed by the runner's memory watch
	Reason     string     `json:"reason,omitempty"`
	// Added fields; the ones above keep their names.
	Trigger string `json:"trigger,omitempty"` // scheduled, manual, catchup or backfill
	Node    string `json:"node,omitempty"`    // the node that wrote the record
	Warning string `json:"warning,omitempty"` // e.g. a corrupt stamp that was overwritten
	// What the command used (its rusage: user+system CPU, and the largest
	// resident set of it and its waited-for descendants).
	CPUSeconds      float64 `json:"cpu_seconds,omitempty"`
	PeakMemoryBytes int64   `json:"peak_memory_bytes,omitempty"`
	// The end of the command's output (wire.OutputTail; nil: the command
	// did not run to its end under this runner), and whether the journal's
	// copy was cut: OutputDroppedBytes dropped over the bounds, or the
	// runner stopped reading a pipe a background process held open.
	OutputTail         *string `json:"output_tail,omitempty"`
	OutputTruncated    bool    `json:"output_truncated,omitempty"`
	OutputDroppedBytes int64   `json:"output_dropped_bytes,omitempty"`
	// Waiting: a started run of a slot that may wait for the previous run
	// to end (overlap_policy buffer_one or cancel_previous), from its first
	// record until it says "ran" (through the stamp wait, the wait and the
	// election): the node agent stops it like a waiting catch-up when the
	// job changes, and it then runs nothing.
	Waiting bool `json:"waiting,omitempty"`
	// TimedOut: the runner stopped the command at the job's timeout
	// (counted from the command's start; see jobspec.Spec.WaitSec).
	TimedOut bool `json:"timed_out,omitempty"`
	// SupersededBy is the slot whose coming stopped this run
	// (overlap_policy cancel_previous): reported cancelled, not failed.
	SupersededBy *time.Time `json:"superseded_by,omitempty"`
}

// RecordFile is the record's name in the service's runtime directory.
const RecordFile = "record.json"

// WriteRecord stores the record atomically in dir.
func WriteRecord(dir string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, RecordFile), b, 0o600); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}
