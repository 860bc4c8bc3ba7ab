package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/slots"
	"github.com/hostcron/hostcron/internal/store"
)

// Bounds of the slots listing: one answer, no paging, so a range is
// bounded by time and by what it holds.
const (
	defaultSlotRange = 24 * time.Hour
	MaxSlotRange     = 31 * 24 * time.Hour
	MaxSlots         = 5000 // fire times, and recorded runs, in one range
)

// slotBody is one slot of the listing.
type slotBody struct {
	// ScheduledAt is the slot (UTC, as run keys spell it); null for a
	// dst_gap, whose wall time had no instant.
	ScheduledAt *time.Time  `json:"scheduled_at"`
	WallTime    string      `json:"wall_time"`
	State       slots.State `json:"state"`
	OffSchedule bool        `json:"off_schedule"`
	Run         *store.Run  `json:"run"`
}

// slotsResponse is the slots listing.
type slotsResponse struct {
	CronJobID string    `json:"cron_job_id"`
	Schedule  string    `json:"schedule"`
	Timezone  string    `json:"timezone"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	// ScheduleSince is when the current schedule took effect: fire times
	// before it were an earlier schedule's and are not listed (its
	// recorded runs are, off_schedule).
	ScheduleSince time.Time  `json:"schedule_since"`
	Slots         []slotBody `json:"slots"`
}

// listSlots answers every fire time of the job's schedule in [from, to)
// with what became of it (docs/semantics.md, "Slots (issue 14)").
func (s *Server) listSlots(c echo.Context) error {
	j, err := s.jobInScope(c)
	if err != nil {
		return err
	}
	from, to, err := s.slotRange(c)
	if err != nil {
		return err
	}
	// Operator-made jobs may carry a seconds field; the node accepts it.
	sched, err := schedule.ParseWithSeconds(j.Schedule, j.Timezone)
	if err != nil {
		return fmt.Errorf("job %s: stored schedule: %w", j.ID, err)
	}
	fires, err := fireTimes(sched, from, to)
	if err != nil {
		return err
	}
	rec, err := s.store.SlotRecords(c.Request().Context(), j.ID, from, to, MaxSlots)
	if err != nil {
		return err
	}
	if rec.More {
		return invalid("from", "the range holds more than %d recorded runs; ask for a shorter one", MaxSlots)
	}
	return c.JSON(http.StatusOK, s.account(j, sched, fires, rec, from, to))
}

// account classifies the job's slots and shapes the answer.
func (s *Server) account(j store.CronJob, sched *schedule.Schedule, fires []time.Time, rec store.SlotRecords,
	from, to time.Time) slotsResponse {
	events := trailEvents(rec.Events)
	since := slots.ScheduleSince(events, j.CreatedAt)
	start := from
	if since.After(start) {
		start = since
	}
	runs := make([]slots.Run, len(rec.Runs))
	byID := make(map[int64]*store.Run, len(rec.Runs))
	for i := range rec.Runs {
		r := &rec.Runs[i]
		runs[i], byID[r.ID] = slots.Run{ID: r.ID, Slot: r.ScheduledAt, Result: r.Result}, r
	}
	list := slots.Classify(slots.Input{
		Loc: sched.Location(), Fires: firesFrom(fires, start), Gaps: sched.Gaps(start, to), Runs: runs,
		Spans: slots.SpansOf(events, j.Enabled, j.CreatedAt), SweptUntil: rec.SweptUntil, Now: s.now(),
		Settle: time.Duration(j.TimeoutSeconds)*time.Second + s.cfg.OutcomeGrace,
	})
	out := slotsResponse{CronJobID: j.ID, Schedule: j.Schedule, Timezone: j.Timezone, From: from, To: to,
		ScheduleSince: since.UTC(), Slots: make([]slotBody, 0, len(list))}
	for _, sl := range list {
		b := slotBody{WallTime: sl.Wall, State: sl.State, OffSchedule: sl.OffSchedule}
		if sl.State != slots.DSTGap {
			at := sl.At.UTC()
			b.ScheduledAt = &at
		}
		if sl.Run != nil {
			b.Run = byID[sl.Run.ID]
		}
		out.Slots = append(out.Slots, b)
	}
	return out
}

// slotRange reads from and to (RFC 3339): to defaults to from + 24 h, or
// now without from; from defaults to to - 24 h. The range is at most
// MaxSlotRange.
func (s *Server) slotRange(c echo.Context) (time.Time, time.Time, error) {
	fromP, err := timeParam(c, "from")
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	toP, err := timeParam(c, "to")
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	var from, to time.Time
	switch {
	case fromP != nil && toP != nil:
		from, to = *fromP, *toP
	case fromP != nil:
		from, to = *fromP, fromP.Add(defaultSlotRange)
	case toP != nil:
		from, to = toP.Add(-defaultSlotRange), *toP
	default:
		to = s.now().UTC().Truncate(time.Second)
		from = to.Add(-defaultSlotRange)
	}
	if !from.Before(to) {
		return from, to, invalid("to", "must be after from")
	}
	if from.Year() < 1 || to.Year() > 9999 {
		return from, to, invalid("from", "the range must lie within the years 0001 to 9999")
	}
	if to.Sub(from) > MaxSlotRange {
		return from, to, invalid("to", "the range may span at most 31 days (%s)", MaxSlotRange)
	}
	return from, to, nil
}

// fireTimes lists the schedule's fire times in [from, to), refusing a
// range with more than MaxSlots of them.
func fireTimes(sched *schedule.Schedule, from, to time.Time) ([]time.Time, error) {
	var out []time.Time
	for t := sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && t.Before(to); t = sched.Next(t) {
		if len(out) == MaxSlots {
			return nil, invalid("from", "the range holds more than %d fire times of the schedule; ask for a shorter one", MaxSlots)
		}
		out = append(out, t)
	}
	return out, nil
}

// firesFrom drops the fire times before start (an earlier schedule's).
func firesFrom(fires []time.Time, start time.Time) []time.Time {
	for i, f := range fires {
		if !f.Before(start) {
			return fires[i:]
		}
	}
	return nil
}

// trailEvents reads what the spans need from the stored trail. JSON
// numbers decode as float64; a detail of another shape is read as empty
// (the trail is written by this code, but an odd entry must not fail
// the listing).
func trailEvents(in []store.JobEvent) []slots.Event {
	out := make([]slots.Event, 0, len(in))
	for _, e := range in {
		ev := slots.Event{At: e.At, Action: e.Action}
		if fs, ok := e.Detail["fields"].([]any); ok {
			for _, f := range fs {
				if name, ok := f.(string); ok {
					ev.Fields = append(ev.Fields, name)
				}
			}
		}
		if n, ok := e.Detail["nodes"].(float64); ok {
			ev.Nodes = int(n)
		}
		ev.Status, _ = e.Detail["status"].(string)
		if b, ok := e.Detail["enabled"].(bool); ok {
			ev.Enabled = &b
		}
		out = append(out, ev)
	}
	return out
}
