package runner

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// Bounds of the decisions below, each with its reason.
const (
	// FireMargin is how late after slot + RandomizedDelaySec a timer may
	// still start the service: PID 1 on a busy node can take seconds to
	// start a unit. A start later than that is not the slot's own fire
	// (a restarted timer, or a oneshot that overran and was queued again).
	FireMargin = 20 * time.Second
	// RequestTTL is how long a run-now request waits for its start.
	RequestTTL = wire.RunNowTTL
	// MaxSkew is how far in the future a stamp may lie before it is
	// treated as corrupt: a node clock this wrong is broken, and a stamp
	// written by it would stop the job for as long.
	MaxSkew = wire.MaxClockSkew
	// LeaseTTL is how long a lock holder may go without a heartbeat
	// (HeartbeatEvery) before it is reported as dead: CephFS keeps the
	// flock of a crashed client until the MDS evicts its session (300 s).
	LeaseTTL       = 30 * time.Second
	HeartbeatEvery = 5 * time.Second
	// ClockVerified is how close to the core API's this node's clock must
	// be measured before the runner trusts it enough to overwrite a stamp
	// from the future: the measurement is good to about a second.
	ClockVerified = 10 * time.Second
	// ClockVerifiedFresh is how old (by CLOCK_BOOTTIME) that measurement
	// may be for the runner to overwrite a stamp from the future on its
	// word: the agent measures every minute, and the shorter the window,
	// the less a clock can have gone wrong since unseen.
	ClockVerifiedFresh = 2 * time.Minute
	// ClockFresh is how old a measurement may be for a clock measured
	// more than MaxSkew off to keep the node from running (clockForbidsRun):
	// that only holds back a node, so it rides out a core API outage of a
	// few minutes.
	ClockFresh = 15 * time.Minute
	// ClockStepTolerance is how far wall time and CLOCK_BOOTTIME may have
	// elapsed apart since the measurement before the runner takes it as a
	// step of the clock (the reading then no longer describes it). NTP
	// slews at most 500 ppm: 0.45 s in 15 minutes.
	ClockStepTolerance = 2 * time.Second
	// CatchUpSpread caps the wait before a catch-up run contends
	// (catchUpWait): a shard coming back fires every persistent timer at
	// once, and the wait spreads their runs over up to this long. Also
	// capped by a tenth of the job's timeout (the wait counts towards
	// TimeoutStartSec, and a timeout is the tenant's failure) and by half
	// the time left to the next slot (a catch-up never starts in it).
	CatchUpSpread = 2 * time.Minute
)

// Start is what systemd tells the service about why it started
// ($TRIGGER_UNIT, systemd 251 and later). $TRIGGER_TIMER_REALTIME_USEC is
// not used: systemd 252 keeps the timer's first elapse in it for every
// later start, so every start after the first would look late.
type Start struct {
	ByTimer bool // a timer started it
}

// Request is a pending run-now request the node agent left in RunNowDir.
type Request struct {
	ID string
	At time.Time
	// Key is the request's run key when it is not a plain run-now (a
	// backfill: the slot it re-runs and the request id); nil for run-now.
	Key *runkey.Key
}

// decision names the run one start is for, or why it runs nothing.
type decision struct {
	Trigger wire.Trigger // scheduled or manual: how the run is elected (slot stamp, or request id)
	// Recorded is the trigger the record says when it is not Trigger's
	// (backfill: a request elected as run-now is, that stands for a past
	// slot).
	Recorded wire.Trigger
	// CatchUp: a scheduled slot run late by the catch-up policy. Its key
	// and election are the slot's own; only its recorded trigger is
	// catchup. Wait is how long it waits before contending.
	CatchUp bool
	Wait    time.Duration
	Slot    time.Time // scheduled: the slot; manual: the request time; backfill: the slot it re-runs
	Request string    // manual only
	Key     string
	Skip    string // a silent Kind: nothing to contend for
	Reason  string // why it skips, for the journal
	// Fallback is a pending request to run instead when the slot turns
	// out to have run already on another node.
	Fallback *decision
	// Next is the schedule's slot after Slot (scheduled only; zero: none),
	// before whose fire a waiting slot gives up (waitDeadline).
	Next time.Time
	// AfterOverrun: a late timer start of the latest slot of a buffer_one
	// or cancel_previous job, which runs the slot only if the stamp shows
	// it was the start systemd queued behind a run that overlapped the
	// slot (afterOverrun, judged under the lock); otherwise a late fire.
	AfterOverrun bool
}

// decideSlot names what this start of the service is for. A timely fire
// of a slot at or after NotBefore runs the slot; a pending request runs
// when the start is not such a fire (or not by the timer at all), or when
// its slot already ran. The caller decides the election; this only names
// the run.
func decideSlot(now time.Time, sched *schedule.Schedule, spec jobspec.Spec, start Start, req *Request) decision {
	d := scheduled(now, sched, spec, start)
	if req == nil || !req.At.Before(now.Add(MaxSkew)) || now.Sub(req.At) > RequestTTL {
		return d
	}
	m := requested(now, sched, spec, req)
	if m.Skip != "" && d.Skip == "" && start.ByTimer {
		return d // a retry too late to run: the timer's slot runs, with nothing to fall back to
	}
	if d.Skip != "" || !start.ByTimer {
		return m
	}
	d.Fallback = &m
	return d
}

// requested names the run of a pending request: a run-now keyed by its
// request, a backfill keyed by the slot it re-runs and its request, or a
// retry keyed by its slot and attempt. All are elected by the request id
// (claimRequest), never by the slot stamp: neither a backfill nor a retry
// is its slot's scheduled run. A retry never starts at or after its
// slot's next fire time (the core queues none that would; a delivery
// delayed past it is dropped here): it is a late fire, silent.
func requested(now time.Time, sched *schedule.Schedule, spec jobspec.Spec, req *Request) decision {
	k := req.Key
	if k == nil || k.JobID != spec.ID || k.RequestID() != req.ID {
		return decision{Trigger: wire.TriggerManual, Slot: req.At.UTC(), Request: req.ID, Key: runkey.Manual(spec.ID, req.ID)}
	}
	d := decision{Trigger: wire.TriggerManual, Recorded: k.Trigger, Slot: k.Slot.UTC(), Request: req.ID, Key: k.String()}
	if k.Trigger == wire.TriggerRetry {
		next := sched.Next(k.Slot)
		switch {
		case next.IsZero() || !now.Before(next):
			d.Skip, d.Reason = KindLateFire, fmt.Sprintf("retry %d of slot %s: its next slot %s has come, a retry never runs past it",
				k.Attempt, k.Slot.Format(time.RFC3339), next.UTC().Format(time.RFC3339))
		case now.Sub(k.Slot) > wire.MaxRetryStart+RequestTTL:
			d.Skip, d.Reason = KindLateFire, fmt.Sprintf("retry %d of slot %s: more than %s after its slot (its report would be refused as too old)",
				k.Attempt, k.Slot.Format(time.RFC3339), wire.MaxRetryStart+RequestTTL)
		}
	}
	return d
}

// scheduled names the slot of a timer fire, or why it is not one to run.
// A fire later than the slot's fire window is a late fire (a restarted
// timer, an overrun, a node or timer that was down): it runs nothing,
// unless the job has a catch-up window, the start is the timer's (a
// persistent timer firing a slot it missed) and the slot is at most that
// old: then it is the slot's catch-up, after catchUpWait.
func scheduled(now time.Time, sched *schedule.Schedule, spec jobspec.Spec, start Start) decision {
	prev := sched.Prev(now)
	if prev.IsZero() {
		return decision{Trigger: wire.TriggerScheduled, Skip: KindLateFire, Reason: "no slot of the schedule before now"}
	}
	slot := sched.FirstInstant(prev).UTC()
	d := decision{Trigger: wire.TriggerScheduled, Slot: slot, Key: runkey.Scheduled(spec.ID, slot), Next: sched.Next(slot)}
	window := time.Duration(spec.RandomizedDelaySec)*time.Second + FireMargin
	catchUp := time.Duration(spec.CatchUpWindowSec) * time.Second
	late := now.Sub(slot)
	switch {
	case slot.Before(spec.NotBefore):
		d.Skip, d.Reason = KindNotBefore, fmt.Sprintf("slot %s is before the job's not-before %s", slot.Format(time.RFC3339), spec.NotBefore.UTC().Format(time.RFC3339))
	case late <= window:
	case catchUp <= 0 && start.ByTimer && spec.OverlapPolicy.OrSkip() != wire.OverlapSkip:
		// Maybe the start systemd queued behind a run that overran this
		// slot (on the node that ran it, the only start it gets).
		d.AfterOverrun = true
		d.Reason = fmt.Sprintf("late fire: started %s after slot %s, outside its window of %s, and not right after a run that overlapped the slot",
			late.Round(time.Second), slot.Format(time.RFC3339), window)
	case catchUp <= 0:
		d.Skip, d.Reason = KindLateFire, fmt.Sprintf("late fire: started %s after slot %s, outside its window of %s (a restarted timer or an overrun; no catch-up)",
			late.Round(time.Second), slot.Format(time.RFC3339), window)
	case !start.ByTimer:
		d.Skip, d.Reason = KindLateFire, fmt.Sprintf("late start: %s after slot %s, not by the timer (only a timer fire catches up)",
			late.Round(time.Second), slot.Format(time.RFC3339))
	case late > catchUp:
		d.Skip, d.Reason = KindLateFire, fmt.Sprintf("late fire: started %s after slot %s, older than its catch-up window of %s",
			late.Round(time.Second), slot.Format(time.RFC3339), catchUp)
	default:
		d.CatchUp = true
		d.Wait = catchUpWait(spec, slot, sched.Next(now).Sub(now))
	}
	return d
}

// catchUpWait is how long the catch-up of slot waits before contending:
// a spread by a hash of job and slot, the same on every node, below
// CatchUpSpread, a tenth of the job's timeout and half of untilNext (the
// time left to the next slot). A spec without a timeout (an older agent's)
// waits not at all.
func catchUpWait(spec jobspec.Spec, slot time.Time, untilNext time.Duration) time.Duration {
	limit := min(CatchUpSpread, time.Duration(spec.TimeoutSec)*time.Second/10, untilNext/2)
	if limit <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(spec.ID + "#" + slot.UTC().Format(time.RFC3339)))
	// In nanoseconds: a limit under a millisecond (a fire just before the
	// next slot) must not divide by zero.
	return time.Duration(h.Sum64() % uint64(limit)).Truncate(time.Millisecond)
}

// busy is what a node that did not get the lock makes of it.
type busy struct {
	Kind   string
	Reason string
}

// classifyBusy tells, for a lock another process holds, whether it runs
// this very run (contention, silent), whether its holder stopped
// heart-beating (a dead node whose flock CephFS has not yet released), or
// whether the previous run is still running (overlap).
func classifyBusy(d decision, st Stamp, haveStamp bool, now time.Time) busy {
	switch {
	case haveStamp && st.covers(d), d.Trigger == wire.TriggerScheduled && st.ranAhead(d.Slot) != nil:
		return busy{Kind: KindContention}
	case haveStamp && !st.Released && !st.Heartbeat.IsZero() && now.Sub(st.Heartbeat) > LeaseTTL:
		return busy{Kind: KindPlatformError, Reason: fmt.Sprintf("lock holder node %s stopped heart-beating at %s (run %s)",
			orUnknown(st.Holder), st.Heartbeat.UTC().Format(time.RFC3339), orUnknown(st.RunKey))}
	default:
		return busy{Kind: KindOverlap, Reason: "the previous run was still running"}
	}
}

// covers reports whether the stamp shows d as started (or a later slot),
// or as run ahead of time on a fast node (RanAhead).
func (st Stamp) covers(d decision) bool {
	if d.Trigger == wire.TriggerManual {
		return st.RunKey == d.Key
	}
	return !st.Slot.Before(d.Slot) || st.ranAhead(d.Slot) != nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// aheadOf reports whether the stamp names a slot further ahead of now than
// MaxSkew: no correct node writes one (slots lie at or before the writer's
// now), unless the clock that reads it is the wrong one.
func aheadOf(st Stamp, now time.Time) bool { return st.Slot.After(now.Add(MaxSkew)) }

// clockState is what the agent's latest reading says of this node's clock.
type clockState int

const (
	clockUnknown  clockState = iota // no reading, a stale one, one of another boot, or the clock stepped since
	clockVerified                   // fresh and within ClockVerified of the core's
	clockOff                        // fresh and further off
)

func (c clockState) String() string {
	switch c {
	case clockVerified:
		return "verified"
	case clockOff:
		return "off"
	}
	return "unknown"
}

// judgeClock classifies reading (nil: none) at now, when it may be at most
// fresh old, and describes it. boot is the kernel's boot id and
// CLOCK_BOOTTIME now (nil: unreadable). The reading's age is boot time
// elapsed since it, never wall time: the wall clock is what the reading
// vouches for, and a clock stepped back (or a VM resumed with its old
// time) would make an old reading look young. Wall time and boot time
// elapsed apart by more than ClockStepTolerance means the clock was stepped
// since the measurement, so the measured offset no longer holds; a reading
// of another boot (or without boot time, from an older agent) says nothing
// of this clock either. All of these are unknown.
func judgeClock(reading *clockoffset.Reading, now time.Time, boot *clockoffset.Boot, fresh time.Duration) (clockState, string) {
	if reading == nil {
		return clockUnknown, "this node's clock offset against the core API is not measured"
	}
	measured := reading.MeasuredAt.UTC().Format(time.RFC3339)
	switch {
	case reading.BootID == "":
		return clockUnknown, fmt.Sprintf("this node's clock offset against the core API (measured %s) carries no boot time (an older node agent)", measured)
	case boot == nil:
		return clockUnknown, "this node's boot time is unreadable, so its clock offset reading cannot be aged"
	case reading.BootID != boot.ID:
		return clockUnknown, fmt.Sprintf("this node's clock offset against the core API was measured (%s) before the node's last boot", measured)
	}
	age := boot.Time - reading.Boottime
	if age < 0 {
		return clockUnknown, fmt.Sprintf("this node's clock offset reading (measured %s) lies in its boot time's future", measured)
	}
	if step := now.Sub(reading.MeasuredAt) - age; step.Abs() > ClockStepTolerance {
		return clockUnknown, fmt.Sprintf("this node's clock was stepped by %s since its offset against the core API was measured (%s, %s ago by boot time)",
			step.Round(time.Second), measured, age.Round(time.Second))
	}
	if age > fresh {
		return clockUnknown, fmt.Sprintf("this node's clock offset against the core API was last measured at %s (%s ago), not within %s", measured, age.Round(time.Second), fresh)
	}
	desc := fmt.Sprintf("this node's clock is %s off the core API's (core minus node, measured %s)", reading.Offset(), measured)
	if reading.Offset().Abs() > ClockVerified {
		return clockOff, desc
	}
	return clockVerified, desc
}

// clockForbidsRun names why a node must not run anything: a reading at
// most ClockFresh old puts its clock more than MaxSkew off, so it names
// slots minutes away from the true ones (a fast node would run them early
// and its stamps would silence the correct nodes). "" lets it run; without
// a fresh reading it runs (the core API may just be down), and only the
// stamp rules below fail closed.
func clockForbidsRun(reading *clockoffset.Reading, now time.Time, boot *clockoffset.Boot) string {
	st, desc := judgeClock(reading, now, boot, ClockFresh)
	if st != clockOff || reading.Offset().Abs() <= MaxSkew {
		return ""
	}
	return fmt.Sprintf("%s, more than %s: not running (fix NTP)", desc, MaxSkew)
}

// futureStamp is what the lock holder does with a stamp aheadOf its clock.
type futureStamp struct {
	Overwrite bool   // the stamp is corrupt, or a fast node's: overwrite it and run
	Reason    string // why not, naming the clock: a platform error
	// Remember: the stamp is a runner's lease, so its slot ran (early, on
	// a fast node): the overwriting stamp keeps it in RanAhead, and that
	// slot does not run again when it comes.
	Remember bool
}

// judgeFutureStamp decides between the two ways a stamp can lie ahead: a
// corrupt stamp (or one a fast-clock node wrote), which must not silence
// the job, and a correct stamp read by a slow-clock node, which must not
// be rewound (a correct node would then run that slot again). Only a
// clock the agent measured recently (ClockVerifiedFresh by boot time, no
// step since) and found close to the core's tells them apart; a clock
// measured off, or not measured, never overwrites and never runs (fail
// closed, never the tenant's failure). reading is nil when there is none,
// boot when it is unreadable. A stamp that is a lease of a run of this job
// (a holder and a run key of jobID) was written by a runner whose clock
// was ahead, and its slot ran then: it is remembered (Remember), so a
// verified node that overwrites it does not run that slot a second time.
func judgeFutureStamp(st Stamp, jobID string, reading *clockoffset.Reading, now time.Time, boot *clockoffset.Boot) futureStamp {
	state, desc := judgeClock(reading, now, boot, ClockVerifiedFresh)
	stamp := st.Slot.UTC().Format(time.RFC3339)
	switch state {
	case clockUnknown:
		return futureStamp{Reason: fmt.Sprintf("slot stamp names %s, more than %s ahead of this node's clock, and %s: not overwriting it, not running (fail closed)",
			stamp, MaxSkew, desc)}
	case clockOff:
		return futureStamp{Reason: fmt.Sprintf("%s: the slot stamp naming %s may be correct; not overwriting it, not running (fix NTP)", desc, stamp)}
	}
	return futureStamp{Overwrite: true, Remember: st.isLeaseOf(jobID)}
}

// Bounds of the overlap policies (docs/semantics.md, "Overlap policies").
const (
	// GiveUpBeforeNext is how long before the next slot's fire a waiting
	// slot gives up: its service must be inactive again when that fire
	// comes, or systemd merges the fire into it and the node never
	// contends for the next slot. It covers the runner's own exit and the
	// outcome hook (ExecStopPost), which spools rather than wait on the
	// core.
	GiveUpBeforeNext = 10 * time.Second
	// OverlapPoll is how often a waiting slot tries the lock.
	OverlapPoll = time.Second
	// WaitSlack is what a waiter waits beyond the previous run's longest
	// life (the job's timeout and the kill grace): the holder's record,
	// release and outcome.
	WaitSlack = 30 * time.Second
	// AfterOverrunMargin is how long after the previous run's release a
	// late start on its node may still be the start systemd queued behind
	// that run (afterOverrun). The release is written before the runner
	// drains the command's output (up to ~2 s, drainBound); after the
	// runner exits, systemd stops what is left in the cgroup (up to
	// TimeoutStopSec, 10 s, KillGrace), runs the outcome hook (its
	// deadline, 5 s, and a spool write), and only then starts the queued
	// start, whose runner reads the stamp on CephFS: some 18 s and shared
	// storage latency, too close to FireMargin's 20 s, where the slot was
	// lost on a one-node shard. 45 s covers all of it with room for a
	// slow filesystem; the stamp still keeps the slot to one run.
	AfterOverrunMargin = 45 * time.Second
)

// MaxWait is the longest a start of a job waits before its command starts
// (jobspec.StartWaitSec): the unit's TimeoutStartSec is the job's timeout
// plus this, and the runner enforces the job's timeout itself from the
// command's start, so no wait is charged as the tenant's timeout.
func MaxWait(policy wire.OverlapPolicy, catchUpWindowSec, timeoutSec int) time.Duration {
	return time.Duration(jobspec.StartWaitSec(policy, catchUpWindowSec, timeoutSec)) * time.Second
}

// overlapAct is what a slot that finds the previous run still going does.
type overlapAct int

const (
	actSkip overlapAct = iota // decide the slot a skip (overlap_skipped), as always
	actWait                   // wait for the lock, until waitDeadline
)

// overlapAction decides, for a start that lost the lock to a live run
// (classifyBusy's KindOverlap), by the job's policy. Only a scheduled
// slot waits: a run-now request has its own wait in the node agent
// (unitmgr.RunNow), and a start that is itself a late start after an
// overrun (AfterOverrun) found the lock taken by the slot's own waiter or
// by a later run, and runs nothing.
func overlapAction(policy wire.OverlapPolicy, d decision) overlapAct {
	if d.Trigger != wire.TriggerScheduled || d.AfterOverrun {
		return actSkip
	}
	switch policy.OrSkip() {
	case wire.OverlapBufferOne, wire.OverlapCancelPrevious:
		return actWait
	}
	return actSkip
}

// overlapWaitCap is the longest a slot waits for the previous run: that
// run ends by its timeout, KillGrace after it at the latest, and WaitSlack
// covers its release. MaxWait holds it, a catch-up's spread and the rest
// of the start, so the job's whole timeout is left after it.
func overlapWaitCap(timeoutSec int) time.Duration {
	return time.Duration(max(timeoutSec, 0))*time.Second + KillGrace + WaitSlack
}

// waitDeadline is when a slot waiting for the previous run gives up:
// GiveUpBeforeNext before the schedule's next slot after slot (its fire
// must find this node's service inactive), and at most overlapWaitCap
// after started. A zero next (a schedule with no later slot) leaves the
// cap.
func waitDeadline(slot, next, started time.Time, timeoutSec int) time.Time {
	limit := started.Add(overlapWaitCap(timeoutSec))
	if next.IsZero() || !next.After(slot) {
		return limit
	}
	if d := next.Add(-GiveUpBeforeNext); d.Before(limit) {
		return d
	}
	return limit
}

// waitStep is one poll of a waiting slot, decided from what it saw.
type waitStep int

const (
	waitOn      waitStep = iota // try the lock again after OverlapPoll
	waitCovered                 // another node runs or ran the slot: silent
	waitHolder                  // the holder stopped heart-beating: platform error
	waitGiveUp                  // the deadline came: the slot is skipped
	waitStopped                 // the runner was told to stop: silent
)

// nextWaitStep decides a waiting slot's poll that did not get the lock:
// stopped first (a disable, delete or cancel of the job), then the stamp
// (the slot ran elsewhere, or its holder died), then the deadline.
func nextWaitStep(d decision, st Stamp, haveStamp bool, now, deadline time.Time, stopped bool) waitStep {
	if stopped {
		return waitStopped
	}
	switch classifyBusy(d, st, haveStamp, now).Kind {
	case KindContention:
		return waitCovered
	case KindPlatformError:
		return waitHolder
	}
	if !now.Before(deadline) {
		return waitGiveUp
	}
	return waitOn
}

// afterOverrun reports whether a late timer start of slot d.Slot is the
// start systemd queued behind the previous run, which was still running
// when d.Slot came (its lease released after the slot, and lately), so
// that the slot is the one buffer_one and cancel_previous run. A late
// start for any other reason (a restarted timer, a node that was down)
// is not: the stamp then shows no run that overlapped the slot.
func afterOverrun(d decision, st Stamp, haveStamp bool, now time.Time) bool {
	if !haveStamp || !st.Released || !st.Slot.Before(d.Slot) {
		return false
	}
	released := st.Heartbeat // release writes its time there
	return !released.Before(d.Slot) && !released.After(now) && now.Sub(released) <= AfterOverrunMargin
}

// supersedeAt is when a running run of a cancel_previous job stops itself:
// at the first slot of the schedule after its own (for a run-now run,
// after its request time). Every node's timer fires that slot at or after
// it (RandomizedDelaySec only delays), so the lock is free, or soon free,
// when they contend, and a waiting node takes it. The holder decides this
// from its own spec and clock, the same decision on every node, with no
// message to lose between nodes. Zero: never (another policy, or no
// later slot).
func supersedeAt(policy wire.OverlapPolicy, sched *schedule.Schedule, slot time.Time) time.Time {
	if policy.OrSkip() != wire.OverlapCancelPrevious {
		return time.Time{}
	}
	return sched.Next(slot)
}
