// Package wire is the vocabulary the core and the nodes share: run results,
// job statuses, triggers, provisioning actions, the desired job, what a
// node reports back, the outcome body, log label names and well-known
// paths. It is a leaf: it imports nothing of hostcron, so both processes
// (and every package on either side) can import it, and a name that is
// spelled here cannot drift between them.
package wire

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Result is what became of one run (or one slot).
type Result string

// Results a node reports, and the ones the core records itself.
const (
	ResultSuccess        Result = "success"
	ResultExitCode       Result = "exit_code"
	ResultSignal         Result = "signal"
	ResultTimeout        Result = "timeout"
	ResultOOM            Result = "oom"
	ResultOverlapSkipped Result = "overlap_skipped"
	ResultFailed         Result = "failed"
	// ResultLost is recorded by the core's sweeper for a slot no node
	// reported within timeout + grace; no node sends it.
	ResultLost Result = "lost"
	// ResultPlatformError is a run the platform could not start or finish
	// (shared storage missing, hung or failing, a stamp that cannot be
	// written): recorded and alerted on, never counted against the tenant.
	ResultPlatformError Result = "platform_error"
	// ResultCancelled is a run stopped at the tenant's request (POST
	// …/runs/{run}/cancel): recorded, counted neither way.
	ResultCancelled Result = "cancelled"
)

// NodeResults are the results a node may report.
var NodeResults = []Result{
	ResultSuccess, ResultExitCode, ResultSignal, ResultTimeout, ResultOOM,
	ResultOverlapSkipped, ResultFailed, ResultPlatformError, ResultCancelled,
}

// Results are every result a run record may hold: a node's, and lost.
var Results = []Result{
	ResultSuccess, ResultExitCode, ResultSignal, ResultTimeout, ResultOOM,
	ResultOverlapSkipped, ResultFailed, ResultPlatformError, ResultCancelled, ResultLost,
}

// ReportedByNode reports whether a node may send r.
func (r Result) ReportedByNode() bool {
	for _, v := range NodeResults {
		if r == v {
			return true
		}
	}
	return false
}

// IsFailure reports whether r is the tenant's failure, the only kind that
// counts towards auto-disable. lost and platform_error are the platform's
// doing, overlap_skipped is no run at all and cancelled was asked for:
// they are recorded and shown but counted neither way.
func (r Result) IsFailure() bool {
	switch r {
	case ResultExitCode, ResultSignal, ResultTimeout, ResultOOM, ResultFailed:
		return true
	}
	return false
}

// IsPlaceholder reports whether r is a record a node's real result
// replaces (a skip, another node's platform error, the sweeper's lost):
// a run under it may still be running, and it never stands for a run of
// the slot that a real record of it stands for.
func (r Result) IsPlaceholder() bool {
	return r == ResultOverlapSkipped || r == ResultPlatformError || r == ResultLost
}

// Status is a cron job's provisioning state as the API shows it.
type Status string

// Job statuses.
const (
	StatusPending      Status = "pending"
	StatusActive       Status = "active"
	StatusDisabled     Status = "disabled"
	StatusAutoDisabled Status = "auto_disabled"
	StatusFailed       Status = "failed"
	StatusDeleting     Status = "deleting"
)

// Statuses are every job status.
var Statuses = []Status{StatusPending, StatusActive, StatusDisabled, StatusAutoDisabled, StatusFailed, StatusDeleting}

// NotProvisionedPrefix begins the status message of a failed
// provisioning; the nodes that failed follow, each as "name: cause",
// separated by "; " (node names have no ':' or space). The core reads the
// names back to tell whether a node's announce can cure the failure.
const NotProvisionedPrefix = "not provisioned on "

// Action is what an outbox task asks the job's workflow to do.
type Action string

// Provisioning actions.
const (
	ActionCreate      Action = "create"
	ActionUpdate      Action = "update"
	ActionEnable      Action = "enable"
	ActionDisable     Action = "disable"
	ActionAutoDisable Action = "auto_disable"
	ActionRetry       Action = "retry"
	ActionDelete      Action = "delete"
	ActionRunNow      Action = "run_now"
	// ActionCancel stops one run (the task's run key) on whichever node
	// of the shard runs it.
	ActionCancel Action = "cancel"
)

// Trigger says why a run started.
type Trigger string

// Triggers.
const (
	TriggerScheduled Trigger = "scheduled"
	TriggerManual    Trigger = "manual"
	// TriggerCatchUp is a slot run late by the catch-up policy
	// (catchup_window_seconds). It is the same run as the slot's on-time
	// run, under the same scheduled run key; only the trigger differs.
	TriggerCatchUp Trigger = "catchup"
	// TriggerBackfill is a run-now request that re-runs a past slot of
	// the schedule (its key names the slot and the request). It is never
	// the slot's scheduled run: the slot stamp and the slots view ignore
	// it, and a slot can be backfilled again by another request.
	TriggerBackfill Trigger = "backfill"
	// TriggerRetry is attempt 2 or later of a scheduled slot whose last
	// attempt failed (the job's retries); its key names the slot and the
	// attempt, and it is elected by a request id made of them.
	TriggerRetry Trigger = "retry"
)

// Retries of a failed scheduled run: a job's retries (0 to MaxRetries)
// and retry_delay_seconds (MinRetryDelaySec to MaxRetryDelaySec), the
// delay before the first retry; each later retry waits twice as long as
// the one before, at most MaxRetryBackoffSec.
const (
	MaxRetries         = 10
	MinRetryDelaySec   = 1
	MaxRetryDelaySec   = 3600
	MaxRetryBackoffSec = 6 * 3600
	// DefaultRetryDelaySec is a new job's retry_delay_seconds.
	DefaultRetryDelaySec = 60
)

// MaxClockSkew is how far ahead of true time a node's clock may run and
// the node still run its slots (the runner's MaxSkew; a node measured
// further off does not run). The core accepts a node's times up to it
// and a margin for its own clock (the API's outcome checks): a run a node
// was allowed to make must be recorded, not refused for good.
const MaxClockSkew = 10 * time.Minute

// MaxRetryStart is how long after its slot a retry may start: a day, so
// that with the longest timeout (a day) it ends well inside the outcome
// hook's MaxRunAge (72 h), which refuses older slots. A weekly job's
// retries stop there, however many are left.
const MaxRetryStart = 24 * time.Hour

// Triggers are every trigger a run may have.
var Triggers = []Trigger{TriggerScheduled, TriggerManual, TriggerCatchUp, TriggerBackfill, TriggerRetry}

// MaxBackfillAge bounds how far back a backfill may reach: a week of
// slots. The outcome hook accepts a backfill's report for as long after
// that as any run's (MaxRunAge), so a backfill of the oldest slot allowed
// still reports after the longest timeout.
const MaxBackfillAge = 7 * 24 * time.Hour

// RecordedTrigger is the trigger to record for a run whose key has
// keyTrigger when its node says reported ("" when it says nothing, as
// older nodes do): the key's, except catchup, which only a scheduled key
// may carry. ok is false for any other disagreement.
func RecordedTrigger(keyTrigger, reported Trigger) (Trigger, bool) {
	switch {
	case reported == "" || reported == keyTrigger:
		return keyTrigger, true
	case reported == TriggerCatchUp && keyTrigger == TriggerScheduled:
		return TriggerCatchUp, true
	}
	return "", false
}

// MaxCatchUpWindowSec bounds catchup_window_seconds: a day. A catch-up
// run may then end up to a day (the window) plus a day (the longest
// timeout) after its slot, which the outcome hook still accepts.
const MaxCatchUpWindowSec = 86400

// OverlapPolicy is what a slot does when it finds the job's previous run
// still running (docs/semantics.md, "Overlap policies").
type OverlapPolicy string

// Overlap policies.
const (
	// OverlapSkip: the slot does not run and is recorded overlap_skipped
	// (the default, and the only behaviour before the policy existed).
	OverlapSkip OverlapPolicy = "skip"
	// OverlapBufferOne: the newest slot that finds the run still going
	// waits for it to end and then runs; every older waiting slot is
	// skipped.
	OverlapBufferOne OverlapPolicy = "buffer_one"
	// OverlapCancelPrevious: the running run is stopped (recorded
	// cancelled) and the new slot runs.
	OverlapCancelPrevious OverlapPolicy = "cancel_previous"
)

// OverlapPolicies are every overlap policy, the default first.
var OverlapPolicies = []OverlapPolicy{OverlapSkip, OverlapBufferOne, OverlapCancelPrevious}

// Valid reports whether p is a known policy; "" (absent: an older core or
// agent) is valid and means skip.
func (p OverlapPolicy) Valid() bool {
	return p == "" || slices.Contains(OverlapPolicies, p)
}

// OrSkip is p, with "" (absent) read as skip.
func (p OverlapPolicy) OrSkip() OverlapPolicy {
	if p == "" {
		return OverlapSkip
	}
	return p
}

// Job is one cron job as a node must have it: what the core sends, what
// the node agent turns into a unit pair and a run spec.
type Job struct {
	ID      string `json:"id"`
	Tenant  string `json:"tenant"`
	Version int64  `json:"version"`
	// Rev is the PostgreSQL transaction (xid8) that wrote this version of
	// the job: with the Snapshot of a converge it tells whether that
	// write was already visible to the snapshot (see Snapshot.Sees).
	// 0: unknown (a core from before revisions).
	Rev     uint64 `json:"rev,omitempty"`
	Enabled bool   `json:"enabled"`
	// NotBefore is when the job was last enabled or had its schedule
	// changed: no slot before it ever runs, whatever systemd does.
	NotBefore        time.Time `json:"not_before"`
	User             string    `json:"user"`
	Group            string    `json:"group"`
	Webroot          string    `json:"webroot"`
	WebStorageDir    string    `json:"web_storage_dir"` // the shard's shared storage; locks live below it
	Schedule         string    `json:"schedule"`
	Timezone         string    `json:"timezone"`
	Command          string    `json:"command"`
	WorkingDirectory string    `json:"working_directory"`
	TimeoutSec       int       `json:"timeout_seconds"`
	MemoryMaxMB      int       `json:"max_memory_mb"`
	// Environment are the job's variables (jobspec.ValidateEnvironment);
	// they may be secrets, and reach a node only in its job spec file.
	Environment map[string]string `json:"environment,omitempty"`
	// CatchUpWindowSec: a missed slot younger than this runs once, late
	// (0: never; an older core sends nothing, which is 0).
	CatchUpWindowSec int `json:"catchup_window_seconds,omitempty"`
	// OverlapPolicy: what a slot does while the previous run still runs
	// ("": an older core, which means skip).
	OverlapPolicy OverlapPolicy `json:"overlap_policy,omitempty"`
}

// UnitName is cron-{tenant}-{id}.
func (j Job) UnitName() string { return UnitName(j.Tenant, j.ID) }

// LockDir is {webStorageDir}/{tenant}/.locks.
func (j Job) LockDir() string { return j.WebStorageDir + "/" + j.Tenant + "/.locks" }

// UnitName is the name of a job's unit pair without suffix:
// cron-{tenant}-{id}. Log shipping and the runner parse it back.
func UnitName(tenant, id string) string { return UnitPrefix + tenant + "-" + id }

// SplitUnitName splits cron-{tenant}-{id} by the shape UnitName makes (the
// id is a canonical UUID, the last 36 bytes): ok is false for a name of
// another shape. It checks the shape only; callers validate the parts.
func SplitUnitName(name string) (tenant, id string, ok bool) {
	const idLen = 36
	rest, found := strings.CutPrefix(name, UnitPrefix)
	if !found || len(rest) < idLen+2 || rest[len(rest)-idLen-1] != '-' {
		return "", "", false
	}
	return rest[:len(rest)-idLen-1], rest[len(rest)-idLen:], true
}

// ValidID reports whether id is a canonical lower-case UUID, the one form
// of every id the core hands out (jobs, tenants, shards, nodes, webroots):
// unit names, run keys and API paths all check it here.
func ValidID(id string) bool { return idRE.MatchString(id) }

var idRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// UnitPrefix starts the name of every unit hostcron manages.
const UnitPrefix = "cron-"

// NodeReport says what one call changed on a node.
type NodeReport struct {
	Written  []string `json:"written"`  // unit files (re)written
	Specs    []string `json:"specs"`    // run specs (re)written
	Removed  []string `json:"removed"`  // units removed
	Enabled  []string `json:"enabled"`  // timers enabled
	Disabled []string `json:"disabled"` // timers disabled
	Reloads  int      `json:"reloads"`  // daemon-reloads issued (0 or 1)
	Failed   []string `json:"failed"`   // jobs that could not be applied, with the reason
	Kept     []string `json:"kept"`     // jobs the node has in a newer version, or newer than a converge's snapshot
	Stale    []string `json:"stale"`    // jobs refused: the node removed them at this version or later (a tombstone)
	// Desired is how many jobs the desired set a reconcile read from the
	// core held (ReconcileFromCore; 0 for the other operations).
	Desired int `json:"desired,omitempty"`
	// Omitted is how many names Bounded left out of the lists above.
	Omitted int `json:"omitted,omitempty"`
}

// MaxReportNames bounds each name list of a report that travels as a
// Temporal payload from a whole-set reconcile: a first converge of 10,000
// jobs onto an empty node writes 30,000 files, whose names alone (some
// 2.2 MB) would pass Temporal's 2 MiB payload limit and fail the
// converge that did the work. 1,000 names a list keep the report under
// about 0.5 MB whatever the shard's size.
const MaxReportNames = 1000

// Bounded is r with each name list cut to its first max names and the
// number cut counted in Omitted; what the node did is unchanged, only
// the report is shorter. A cut list is a copy: the report outlives the
// converge that made it, and must not hold all of a large converge's
// names (30,000 at 10,000 jobs) through the cut list's backing array.
func (r NodeReport) Bounded(max int) NodeReport {
	cut := func(names []string) []string {
		if len(names) <= max {
			return names
		}
		r.Omitted += len(names) - max
		return slices.Clone(names[:max])
	}
	r.Failed, r.Written, r.Specs, r.Removed = cut(r.Failed), cut(r.Written), cut(r.Specs), cut(r.Removed)
	r.Enabled, r.Disabled, r.Kept, r.Stale = cut(r.Enabled), cut(r.Disabled), cut(r.Kept), cut(r.Stale)
	return r
}

// Changed reports whether the call changed anything on the node.
func (r NodeReport) Changed() bool {
	return len(r.Written)+len(r.Specs)+len(r.Removed)+len(r.Enabled)+len(r.Disabled) > 0
}

// UnitState is what a node reports about one cron job's units.
type UnitState struct {
	Name          string `json:"name"`
	Hash          string `json:"hash"` // sha256 of timer + service files
	TimerEnabled  bool   `json:"timer_enabled"`
	TimerActive   bool   `json:"timer_active"`
	NextElapseUS  uint64 `json:"next_elapse_usec"` // realtime, 0 if none
	ServiceActive string `json:"service_active"`
	LastResult    string `json:"last_result"` // the service's Result property
}

// Outcome is the body of POST /internal/v1/cron-jobs/{id}/outcome: what a
// node's outcome hook reports about one run or skip.
type Outcome struct {
	RunKey        string     `json:"run_key"`
	Version       int64      `json:"version"` // of the job spec the run used
	ScheduledAt   time.Time  `json:"scheduled_at"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	Result        Result     `json:"result"`
	ExitCode      *int       `json:"exit_code"`
	Signal        *string    `json:"signal"`
	FailureReason string     `json:"failure_reason"`
	// Added fields (an older core ignores them). What the command used,
	// from the runner's rusage of it (the tenant can rewrite the record
	// they come from: informational only, never counted), and the
	// activation's systemd invocation id (cron-outcome's own
	// $INVOCATION_ID), which every journal line of the run carries.
	CPUSeconds      *float64 `json:"cpu_seconds,omitempty"`
	PeakMemoryBytes *int64   `json:"peak_memory_bytes,omitempty"`
	InvocationID    string   `json:"invocation_id,omitempty"`
	// The command's output as the runner saw it (OutputTail): its last
	// MaxOutputTail bytes (nil: not captured, e.g. no command ran or a
	// node from before the tail), and whether the journal's copy of it was
	// cut (OutputTruncated) and by how many bytes the runner dropped.
	// Informational only, like the usage figures.
	OutputTail         *string `json:"output_tail,omitempty"`
	OutputTruncated    bool    `json:"output_truncated,omitempty"`
	OutputDroppedBytes int64   `json:"output_dropped_bytes,omitempty"`
	// Trigger is the run's trigger when it is not the run key's: catchup
	// for a scheduled key (wire.RecordedTrigger); omitted otherwise.
	Trigger Trigger `json:"trigger,omitempty"`
	// Shutdown: the platform_error is the node's shutdown stopping the
	// run (outcome.ShutDown, on PID 1's word). The hook sets it, never the
	// tenant's record; the core retries such an attempt as a failure when
	// the report comes from the activation that ran it.
	Shutdown bool `json:"shutdown,omitempty"`
}

var invocationRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// ValidInvocationID reports whether s is a systemd invocation id as
// $INVOCATION_ID and _SYSTEMD_INVOCATION_ID spell it.
func ValidInvocationID(s string) bool { return invocationRE.MatchString(s) }

// Bounds of a report's usage figures (a run lasts at most days; no node
// has a petabyte of memory).
const (
	MaxCPUSeconds      = 1e7
	MaxPeakMemoryBytes = 1 << 50
	// MaxOutputDroppedBytes bounds output_dropped_bytes: more than any
	// run writes in its longest timeout.
	MaxOutputDroppedBytes = 1 << 50
)

// RunStart is what a node agent reports of a run its node is running (the
// runner's record says "ran"): the core shows the run as running until its
// outcome arrives. Display only; never counted.
type RunStart struct {
	RunKey       string    `json:"run_key"`
	Version      int64     `json:"version"`
	ScheduledAt  time.Time `json:"scheduled_at"`
	StartedAt    time.Time `json:"started_at"`
	InvocationID string    `json:"invocation_id,omitempty"`
	// Trigger is the run's trigger when it is not the run key's: catchup
	// for a scheduled key (RecordedTrigger); omitted otherwise.
	Trigger Trigger `json:"trigger,omitempty"`
}

// Loki stream labels of cron output. The API's log queries select by the
// same names the node agent pushes.
const (
	LabelLogType   = "log_type"
	LabelJob       = "job"
	LabelNode      = "node"
	LabelTenant    = "tenant_id" // the tenant's name
	LabelCronJobID = "cron_job_id"
	// LabelInvocationID is structured metadata too: the systemd invocation
	// of the run a line belongs to (journald's trusted
	// _SYSTEMD_INVOCATION_ID), which the logs API's run= filter selects.
	LabelInvocationID = "invocation_id"

	LogTypeCron = "cron" // value of LabelLogType and LabelJob
)

// Files of one job in its tenant's lock directory on shared storage. Every
// node's runner opens the same names; the election depends on it.
func LockFileName(jobID string) string { return UnitPrefix + jobID + ".lock" }

// SlotStampName holds the last scheduled slot that was started.
func SlotStampName(jobID string) string { return UnitPrefix + jobID + ".slot" }

// ManualStampName holds the ids of the last run-now requests that were
// started, so a request never runs twice.
func ManualStampName(jobID string) string { return UnitPrefix + jobID + ".manual" }

// SkipMarkerPrefix starts the name of a job's overlap skip markers; the
// slot (Unix seconds) follows. The one node that creates a slot's marker
// (O_EXCL) reports the skip; every other node stays silent.
func SkipMarkerPrefix(jobID string) string { return UnitPrefix + jobID + ".skip." }

// RunNowRequest asks one node to start one run-now run of a unit. Request
// is the outbox task id: the run's key is runkey.Manual(job, Request).
type RunNowRequest struct {
	Unit    string `json:"unit"`
	Request string `json:"request"`
	// RunKey is the key of a request that is not a plain run-now (a
	// backfill: runkey.Backfill(job, slot, Request); a retry:
	// runkey.Retry(job, slot, attempt), Request its RequestID); empty for
	// run-now. An older node agent ignores it and runs the request as a
	// run-now of Request.
	RunKey string `json:"run_key,omitempty"`
}

// ErrRunNowNotTaken: no start on the node took a run-now request in time;
// the core hands it to another node (where a run of the job still holding
// the lock makes it an overlap skip, reported), never to this one again.
var ErrRunNowNotTaken = errors.New("run now: request not taken on this node")

// ErrRunNowNotHere: the node cannot serve a run-now request at all (the
// unit is not on it, its spec is unreadable, the request is malformed): a
// retry would fail the same way, so the core asks the next node at once.
var ErrRunNowNotHere = errors.New("run now: not possible on this node")

// RunNowTTL is how long a run-now request waits on a node for its start:
// the runner drops an older one, and the node agent waits at most this
// long for a run of the job on its node to end before it gives the
// request up there.
const RunNowTTL = 5 * time.Minute

// CancelRequest asks one node to stop one run of a unit, if the node runs
// it now.
type CancelRequest struct {
	Unit   string `json:"unit"`
	RunKey string `json:"run_key"`
}

// CancelMarker is what the node agent leaves in CancelDir before it stops
// a unit for a cancel: cron-outcome reports the run as cancelled only when
// the marker names the run and the very activation it ends (systemd's
// $INVOCATION_ID), which the tenant can neither write nor choose.
type CancelMarker struct {
	RunKey       string    `json:"run_key"`
	InvocationID string    `json:"invocation_id"`
	At           time.Time `json:"at"`
}

// Well-known paths on a node.
const (
	// CancelDir holds cancel markers, one file per unit (CancelMarker):
	// written by the node agent, read and removed by cron-outcome; root's
	// only.
	CancelDir = "/run/hostcron/cancel"
	// RunNowDir holds run-now requests, one file per unit: written by the
	// node agent, read by the runner (world-readable, not secret).
	RunNowDir = "/run/hostcron/manual"
	// ClockOffsetFile is the node agent's latest measurement of this
	// node's clock against the core API's (clockoffset.Reading), read by
	// the runner before it overwrites a stamp from the future.
	ClockOffsetFile = "/run/hostcron/clock-offset.json"
)

// Signals are the names a run may report as what killed it (Linux, as
// golang.org/x/sys/unix.SignalName spells them). Anything else in a report
// is refused: the name comes from a file the tenant can write.
var Signals = []string{
	"SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
	"SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
	"SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU",
	"SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS",
}

// ValidSignal reports whether name is one of Signals.
func ValidSignal(name string) bool {
	for _, s := range Signals {
		if s == name {
			return true
		}
	}
	return false
}

// Bounds of what a node reports; the hook and the API check the same ones.
const (
	MaxExitCode      = 255
	MaxFailureReason = 2048 // bytes of failure_reason
)
