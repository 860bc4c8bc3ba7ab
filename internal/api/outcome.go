package api

import (
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

func (s *Server) outcome(c echo.Context) error {
	jobID, err := pathID(c, "id")
	if err != nil {
		return err
	}
	// Unknown fields are ignored: a node upgraded before the core must not
	// have its reports refused. Every known field is range-checked.
	var req wire.Outcome // what cron-outcome posts
	if err := decodeLenient(c, &req); err != nil {
		return err
	}
	key, err := validateOutcome(jobID, req, s.now())
	if err != nil {
		return err
	}
	trigger, _ := wire.RecordedTrigger(key.Trigger, req.Trigger) // checked by validateOutcome
	node := nodeOf(c)
	res, err := s.outcomes.RecordOutcome(c.Request().Context(), node, jobID, store.Outcome{
		RunKey: req.RunKey, Version: req.Version, ScheduledAt: req.ScheduledAt.UTC(), StartedAt: req.StartedAt, FinishedAt: req.FinishedAt,
		Result: req.Result, ExitCode: req.ExitCode, Signal: req.Signal, FailureReason: req.FailureReason,
		CPUSeconds: req.CPUSeconds, PeakMemoryBytes: req.PeakMemoryBytes, InvocationID: req.InvocationID,
		OutputTail: req.OutputTail, OutputTruncated: req.OutputTruncated || req.OutputDroppedBytes > 0, OutputDroppedBytes: req.OutputDroppedBytes,
		Trigger: trigger, Shutdown: req.Shutdown && req.Result == wire.ResultPlatformError,
	})
	if errors.Is(err, store.ErrVersionAhead) {
		return invalid("version", "%v", err)
	}
	if err != nil {
		return err
	}
	if !res.Duplicate {
		s.metrics.RunRecorded(node.ShardID, req.Result, trigger)
		s.metrics.OutcomeIngested(req.FinishedAt, s.now())
		if res.AutoDisabled {
			s.metrics.AutoDisabled()
			s.log.Info("cron job auto-disabled", "cron_job_id", jobID, "consecutive_failures", res.Job.ConsecutiveFailures)
		}
	}
	status := string(res.Job.Status)
	if res.Deleted {
		// 200, not 404: the run is recorded in the deleted job's history,
		// and the node must not keep the report (store.recordLateOutcome).
		status = "deleted"
		if !res.Duplicate {
			s.log.Info("outcome of a deleted cron job recorded in its history", "cron_job_id", jobID, "run_key", req.RunKey, "result", req.Result)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"duplicate": res.Duplicate, "auto_disabled": res.AutoDisabled,
		"consecutive_failures": res.Job.ConsecutiveFailures, "status": status,
	})
}

// Bounds of an outcome's times: a node's clock may run ahead as far as
// the runner lets it run (wire.MaxClockSkew), and the core's own clock
// may be a little behind; a slot older than run retention would be
// deleted at once.
const (
	outcomeSkew  = wire.MaxClockSkew + 5*time.Minute
	runRetention = 180 * 24 * time.Hour
)

// validateOutcome checks a report against the path's job and the clock.
// Everything it refuses is a 400: the store never sees a value it cannot
// hold (PostgreSQL refuses NUL bytes with an error that would be a 500).
func validateOutcome(jobID string, req wire.Outcome, now time.Time) (runkey.Key, error) {
	key, err := runkey.Parse(req.RunKey)
	return key, checkOutcome(jobID, key, err, req, now)
}

func checkOutcome(jobID string, key runkey.Key, err error, req wire.Outcome, now time.Time) error {
	switch {
	case err != nil:
		return invalid("run_key", "%v", err)
	case key.JobID != jobID:
		return invalid("run_key", "names job %s, not %s", key.JobID, jobID)
	case !validTrigger(key.Trigger, req.Trigger):
		return invalid("trigger", "%q does not go with a %s run key (only a scheduled run may say catchup)", req.Trigger, key.Trigger)
	case !key.Slot.IsZero() && !key.Slot.Equal(req.ScheduledAt): // scheduled, backfill, retry
		return invalid("scheduled_at", "does not match the run key's slot %s", key.Slot.Format(time.RFC3339))
	case req.ScheduledAt.After(now.Add(outcomeSkew)):
		return invalid("scheduled_at", "is in the future")
	case req.ScheduledAt.Before(now.Add(-runRetention)):
		return invalid("scheduled_at", "is older than run retention")
	case req.Version < 1:
		return invalid("version", "must be the version of the job spec the run used")
	case !req.Result.ReportedByNode():
		return invalid("result", "unknown result")
	case req.ExitCode != nil && (*req.ExitCode < 0 || *req.ExitCode > wire.MaxExitCode):
		return invalid("exit_code", "must be from 0 to %d", wire.MaxExitCode)
	case req.Signal != nil && !wire.ValidSignal(*req.Signal):
		return invalid("signal", "unknown signal name")
	case len(req.FailureReason) > wire.MaxFailureReason:
		return invalid("failure_reason", "at most %d bytes", wire.MaxFailureReason)
	case !utf8.ValidString(req.FailureReason) || strings.ContainsRune(req.FailureReason, 0):
		return invalid("failure_reason", "must be UTF-8 without NUL bytes")
	case req.CPUSeconds != nil && !(*req.CPUSeconds >= 0 && *req.CPUSeconds <= wire.MaxCPUSeconds): // also NaN
		return invalid("cpu_seconds", "must be from 0 to %g", float64(wire.MaxCPUSeconds))
	case req.PeakMemoryBytes != nil && (*req.PeakMemoryBytes < 0 || *req.PeakMemoryBytes > wire.MaxPeakMemoryBytes):
		return invalid("peak_memory_bytes", "must be from 0 to %d", int64(wire.MaxPeakMemoryBytes))
	case req.InvocationID != "" && !wire.ValidInvocationID(req.InvocationID):
		return invalid("invocation_id", "must be a systemd invocation id (32 lowercase hex digits)")
	case req.OutputTail != nil && !wire.ValidOutputTail(*req.OutputTail):
		return invalid("output_tail", "at most %d bytes of UTF-8 without NUL bytes", wire.MaxOutputTail)
	case req.OutputDroppedBytes < 0 || req.OutputDroppedBytes > wire.MaxOutputDroppedBytes:
		return invalid("output_dropped_bytes", "must be from 0 to %d", int64(wire.MaxOutputDroppedBytes))
	}
	for name, t := range map[string]*time.Time{"started_at": req.StartedAt, "finished_at": req.FinishedAt} {
		if t != nil && (t.After(now.Add(outcomeSkew)) || t.Before(now.Add(-runRetention))) {
			return invalid(name, "is in the future or older than run retention")
		}
	}
	if req.StartedAt != nil && req.FinishedAt != nil && req.FinishedAt.Before(*req.StartedAt) {
		return invalid("finished_at", "is before started_at")
	}
	return nil
}

func validTrigger(keyTrigger, reported wire.Trigger) bool {
	_, ok := wire.RecordedTrigger(keyTrigger, reported)
	return ok
}

// started notes a run a node reports running (wire.RunStart): display
// only, so a start that does not check out is refused (400) and one for a
// run already recorded changes nothing.
func (s *Server) started(c echo.Context) error {
	jobID, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var req wire.RunStart
	if err := decodeLenient(c, &req); err != nil {
		return err
	}
	if err := checkStart(jobID, req, s.now()); err != nil {
		return err
	}
	noted, err := s.store.RecordStart(c.Request().Context(), nodeOf(c), jobID, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"noted": noted})
}

// checkStart holds a start report to the rules an outcome's times and key
// are held to (the same job, slot, clock bounds and invocation format).
func checkStart(jobID string, st wire.RunStart, now time.Time) error {
	key, err := runkey.Parse(st.RunKey)
	if err == nil {
		if _, ok := wire.RecordedTrigger(key.Trigger, st.Trigger); !ok {
			return invalid("trigger", "differs from the run key's (only a scheduled key may say catchup)")
		}
	}
	started := st.StartedAt
	return checkOutcome(jobID, key, err, wire.Outcome{RunKey: st.RunKey, Version: st.Version, ScheduledAt: st.ScheduledAt,
		StartedAt: &started, Result: wire.ResultSuccess, InvocationID: st.InvocationID}, now)
}
