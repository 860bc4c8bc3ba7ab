// Package slots accounts for every fire time of a job's schedule in a
// range: what became of it (docs/semantics.md, "Slots (issue 14)"). It is
// pure: the store reads the runs and the audit trail, the schedule gives
// the fire times, and Classify decides, so every rule is table-tested.
package slots

import (
	"sort"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// State is what became of a slot.
type State string

// The states a slot can be in. late_fire_skipped is not among them: a
// node refuses a late fire silently (runner KindLateFire is never
// reported), so such a slot is whatever the sweeper made of it (lost).
const (
	Ran               State = "ran"                 // a node ran it (success or a tenant failure)
	SkippedOverlap    State = "skipped_overlap"     // the previous run still ran
	Lost              State = "lost"                // the sweeper found no report within timeout + grace
	PlatformError     State = "platform_error"      // the platform failed the run
	Cancelled         State = "cancelled"           // stopped on request
	JobDisabled       State = "job_disabled"        // the job was disabled (or being deleted) then
	NotYetProvisioned State = "not_yet_provisioned" // no node had the job's current schedule yet
	DSTGap            State = "dst_gap"             // the wall time did not exist: systemd skips it
	Pending           State = "pending"             // future, or too recent for a report to be due
	NotSweptYet       State = "not_swept_yet"       // no record yet; the sweeper has not reached it
	Unknown           State = "unknown"             // no record, and the trail cannot say why
)

// States lists every state, in the order the docs give them.
var States = []State{Ran, SkippedOverlap, Lost, PlatformError, Cancelled, JobDisabled, NotYetProvisioned,
	DSTGap, Pending, NotSweptYet, Unknown}

// Run is a recorded scheduled run, as much as classifying needs.
type Run struct {
	ID     int64
	Slot   time.Time
	Result wire.Result
}

// Tri is a yes/no the audit trail may not be able to tell.
type Tri int8

// Tri values; the zero value is TriUnknown.
const (
	TriUnknown Tri = iota
	TriYes
	TriNo
)

func (t Tri) flip() Tri {
	switch t {
	case TriYes:
		return TriNo
	case TriNo:
		return TriYes
	}
	return TriUnknown
}

func triOf(b bool) Tri {
	if b {
		return TriYes
	}
	return TriNo
}

// Span is the job's state from From until the next span's From (the last
// one holds on).
type Span struct {
	From        time.Time
	Enabled     Tri
	Provisioned bool // a node had the job's current schedule, enabled
}

// Input is what Classify needs; the caller reads it.
type Input struct {
	Loc   *time.Location // the job's zone, for wall times
	Fires []time.Time    // the current schedule's fire times in the range, ascending
	Gaps  []schedule.Gap // its wall times in the range that did not exist
	Runs  []Run          // scheduled runs (and retries) recorded with a slot in the range, by slot then record id
	Spans []Span         // SpansOf; ascending
	// SweptUntil is where the lost-run sweep stands (nil: not started).
	SweptUntil *time.Time
	Now        time.Time
	// Settle is timeout + the sweeper's grace: no report is due for a
	// slot younger than that.
	Settle time.Duration
}

// Slot is one fire time and what became of it.
type Slot struct {
	At    time.Time // the slot; for a DSTGap the instant clocks jumped
	Wall  string    // local wall time in the job's zone
	State State
	Run   *Run // the record, when there is one
	// OffSchedule: a recorded run whose slot is no fire time of the
	// current schedule (an earlier schedule's).
	OffSchedule bool
}

// wallLayout is how a slot's local wall time is written.
const wallLayout = "2006-01-02T15:04:05"

// Classify lists every fire time with its state, every recorded run whose
// slot is not a fire time (so nothing recorded is hidden) and every DST
// gap, in time order. Of several runs of one slot (its attempts) the last
// in the input is the slot's (its last attempt), unless it is a
// placeholder (a retry that was skipped or lost never ran) after an
// attempt that ran: then that attempt is.
func Classify(in Input) []Slot {
	byKey := make(map[int64]*Run, len(in.Runs))
	for i := range in.Runs {
		k := in.Runs[i].Slot.UnixNano()
		if prev, ok := byKey[k]; ok && in.Runs[i].Result.IsPlaceholder() && !prev.Result.IsPlaceholder() {
			continue
		}
		byKey[k] = &in.Runs[i]
	}
	spans := proven(in.Spans, in.Runs)
	out := make([]Slot, 0, len(in.Fires)+len(in.Gaps))
	for _, f := range in.Fires {
		s := Slot{At: f, Wall: f.In(in.Loc).Format(wallLayout)}
		if r, ok := byKey[f.UnixNano()]; ok {
			s.State, s.Run = ofRun(r.Result), r
			delete(byKey, f.UnixNano())
		} else {
			s.State = withoutRecord(f, spanAt(spans, f), in)
		}
		out = append(out, s)
	}
	for i := range in.Runs {
		r := &in.Runs[i]
		if _, left := byKey[r.Slot.UnixNano()]; left {
			out = append(out, Slot{At: r.Slot, Wall: r.Slot.In(in.Loc).Format(wallLayout), State: ofRun(r.Result),
				Run: r, OffSchedule: true})
		}
	}
	for _, g := range in.Gaps {
		out = append(out, Slot{At: g.At, Wall: withSeconds(g.Wall), State: DSTGap})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// ofRun maps a record's result to its slot's state. A result this code
// does not know is a node's report of a run, so it ran.
func ofRun(r wire.Result) State {
	switch r {
	case wire.ResultOverlapSkipped:
		return SkippedOverlap
	case wire.ResultLost:
		return Lost
	case wire.ResultPlatformError:
		return PlatformError
	case wire.ResultCancelled:
		return Cancelled
	}
	return Ran
}

// withoutRecord decides a fire time no record names. Disabled first (a
// disabled job's future slots will not run either), then too recent for
// a report to be due, then the job's provisioning, then what the sweeper
// did. The sweeper records every slot of a provisioned, enabled job it
// passes, so a slot it passed without a record is one it was not asked
// to count: unknown, never invented as lost.
func withoutRecord(f time.Time, sp *Span, in Input) State {
	switch {
	case sp == nil:
		return Unknown // before anything the trail holds
	case sp.Enabled == TriNo:
		return JobDisabled
	case !f.Add(in.Settle).Before(in.Now):
		return Pending
	case !sp.Provisioned:
		return NotYetProvisioned
	case sp.Enabled == TriUnknown:
		return Unknown
	case in.SweptUntil == nil || f.After(*in.SweptUntil):
		return NotSweptYet
	}
	return Unknown
}

// spanAt is the span holding t; nil before the first.
func spanAt(spans []Span, t time.Time) *Span {
	i := sort.Search(len(spans), func(i int) bool { return spans[i].From.After(t) })
	if i == 0 {
		return nil
	}
	return &spans[i-1]
}

// proven splits each enabled span no provisioning proved at the first run
// recorded in it: a node reported that slot, so it had the schedule, and
// the slots after it count as provisioned (the sweep starts there too:
// sweepAfterOutcome).
func proven(spans []Span, runs []Run) []Span {
	out := make([]Span, 0, len(spans))
	for i, sp := range spans {
		out = append(out, sp)
		if sp.Provisioned || sp.Enabled == TriNo {
			continue
		}
		var end time.Time
		if i+1 < len(spans) {
			end = spans[i+1].From
		}
		if first, ok := firstRunIn(runs, sp.From, end); ok {
			out = append(out, Span{From: first, Enabled: sp.Enabled, Provisioned: true})
		}
	}
	return out
}

// firstRunIn is the earliest run slot in [from, end) (end zero: no end).
func firstRunIn(runs []Run, from, end time.Time) (time.Time, bool) {
	var first time.Time
	for _, r := range runs {
		if r.Slot.Before(from) || (!end.IsZero() && !r.Slot.Before(end)) {
			continue
		}
		if first.IsZero() || r.Slot.Before(first) {
			first = r.Slot
		}
	}
	return first, !first.IsZero()
}

// withSeconds writes a gap's wall time (DSTNote's form, seconds only when
// not 0) as every slot's, with seconds.
func withSeconds(wall string) string {
	if len(wall) == len("2006-01-02T15:04") {
		return wall + ":00"
	}
	return wall
}
