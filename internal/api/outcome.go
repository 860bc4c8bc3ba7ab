package api

import (
	"net/http"
	"time"

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
	var req wire.Outcome // what cron-outcome posts
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	key, err := runkey.Parse(req.RunKey)
	switch {
	case err != nil:
		return invalid("run_key", "%v", err)
	case key.JobID != jobID:
		return invalid("run_key", "names job %s, not %s", key.JobID, jobID)
	case key.Trigger == wire.TriggerScheduled && !key.Slot.Equal(req.ScheduledAt):
		return invalid("scheduled_at", "does not match the run key's slot %s", key.Slot.Format(time.RFC3339))
	case req.Version < 1:
		return invalid("version", "must be the version of the job spec the run used")
	case !req.Result.ReportedByNode():
		return invalid("result", "unknown result %q", req.Result)
	case len(req.FailureReason) > 2048:
		return invalid("failure_reason", "at most 2048 bytes")
	case req.StartedAt != nil && req.FinishedAt != nil && req.FinishedAt.Before(*req.StartedAt):
		return invalid("finished_at", "is before started_at")
	}
	res, err := s.store.RecordOutcome(c.Request().Context(), nodeOf(c), jobID, store.Outcome{
		RunKey: req.RunKey, Version: req.Version, ScheduledAt: req.ScheduledAt.UTC(), StartedAt: req.StartedAt, FinishedAt: req.FinishedAt,
		Result: req.Result, ExitCode: req.ExitCode, Signal: req.Signal, FailureReason: req.FailureReason,
	})
	if err != nil {
		return err
	}
	if !res.Duplicate {
		s.metrics.observeOutcome(req.Result, req.FinishedAt, s.now())
		if res.AutoDisabled {
			s.metrics.autoDisables.Inc()
			s.log.Info("cron job auto-disabled", "cron_job_id", jobID, "consecutive_failures", res.Job.ConsecutiveFailures)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"duplicate": res.Duplicate, "auto_disabled": res.AutoDisabled,
		"consecutive_failures": res.Job.ConsecutiveFailures, "status": res.Job.Status,
	})
}
