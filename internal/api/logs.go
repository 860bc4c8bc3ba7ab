package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// LogQuerier runs LogQL queries (Loki's query_range).
type LogQuerier interface {
	QueryRange(ctx context.Context, query string, start, end time.Time, limit int) ([]logship.Line, error)
}

// maxLogWindow bounds how far back one query may look.
const maxLogWindow = 30 * 24 * time.Hour

func (s *Server) tenantLogs(c echo.Context) error {
	tenantID, err := tenantInScope(c)
	if err != nil {
		return err
	}
	tenant, err := s.store.GetTenant(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	if lt := c.QueryParam("log_type"); lt != "" && lt != wire.LogTypeCron {
		return invalid("log_type", "only \"cron\" is supported")
	}
	jobID := c.QueryParam("cron_job_id")
	if jobID != "" {
		if !wire.ValidID(jobID) {
			return invalid("cron_job_id", "must be a cron job's UUID")
		}
		j, err := s.store.GetJob(c.Request().Context(), jobID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && j.TenantID != tenant.ID) {
			return errNotFound
		}
		if err != nil {
			return err
		}
	}
	now := s.now()
	start, end := now, now
	var invocation string
	if c.QueryParam("run") != "" { // the run's own time; since is ignored
		w, err := s.runLogWindow(c, tenant.ID, jobID, now)
		if err != nil {
			return err
		}
		jobID, invocation, start, end = w.jobID, w.invocation, w.start, w.end
	} else if start, err = parseSince(c.QueryParam("since"), now); err != nil {
		return err
	}
	limit, err := intParam(c, "limit", 100, 1, 5000)
	if err != nil {
		return err
	}
	contains := c.QueryParam("contains")
	if len(contains) > 256 || strings.IndexFunc(contains, unicode.IsControl) >= 0 {
		return invalid("contains", "at most 256 characters, no control characters")
	}
	if s.cfg.Logs == nil {
		return &apiError{http.StatusServiceUnavailable, ProblemDetail{Code: "unavailable", Message: "no log store configured"}}
	}
	lines, err := s.cfg.Logs.QueryRange(c.Request().Context(), logship.CronLogQuery(tenant.Name, jobID, invocation, contains), start, end, limit)
	if err != nil {
		s.log.Error("log query failed", "tenant", tenant.Name, "err", err)
		return &apiError{http.StatusBadGateway, ProblemDetail{Code: "log_store", Message: "the log store did not answer"}}
	}
	if lines == nil {
		lines = []logship.Line{}
	}
	return c.JSON(http.StatusOK, map[string]any{"lines": lines, "start": start, "end": end})
}

// runWindow is where one run's output lies: its job, its invocation and
// its time range.
type runWindow struct {
	jobID, invocation string
	start, end        time.Time
}

// Slack around a run's own times for its output: the journal stamps a
// line when journald reads it, which can trail the run's end on a loaded
// node, and node clocks differ a little.
const (
	runLogLead  = time.Minute
	runLogTrail = 5 * time.Minute
)

// runLogWindow reads the run= parameter: a run key of one of the tenant's
// jobs (cron_job_id, if given, must be its job). The run's record gives
// its invocation, which selects exactly its lines, and its times, which
// bound the query (since is ignored); a run in progress is read from its
// start report, up to now. A run with no invocation (reported by an older
// node) cannot be told apart from its neighbours: 409.
func (s *Server) runLogWindow(c echo.Context, tenantID, jobID string, now time.Time) (runWindow, error) {
	key, err := runkey.Parse(c.QueryParam("run"))
	if err != nil {
		return runWindow{}, invalid("run", "must be a run key, as the runs listing gives it")
	}
	if jobID != "" && key.JobID != jobID {
		return runWindow{}, invalid("run", "is a run of another job than cron_job_id")
	}
	ctx := c.Request().Context()
	j, err := s.store.GetJob(ctx, key.JobID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && j.TenantID != tenantID) {
		return runWindow{}, errNotFound
	}
	if err != nil {
		return runWindow{}, err
	}
	run, err := s.store.GetRun(ctx, key.JobID, 0, key.String())
	if (err == nil && store.IsPlaceholder(run.Result)) || errors.Is(err, store.ErrNotFound) {
		// A run in progress has no record yet (or only a placeholder
		// another node wrote): its start report names its invocation, and
		// its output so far runs up to now.
		rr, ok, rerr := s.runningRun(ctx, key.JobID, key.String())
		if rerr != nil {
			return runWindow{}, rerr
		}
		if ok && rr.InvocationID != "" {
			return runWindow{jobID: key.JobID, invocation: rr.InvocationID, start: rr.StartedAt.Add(-runLogLead), end: now}, nil
		}
	}
	if err != nil {
		return runWindow{}, err
	}
	if run.InvocationID == "" || run.StartedAt == nil {
		return runWindow{}, &apiError{http.StatusConflict, ProblemDetail{Code: "no_run_output_handle",
			Message: "this run's output carries no invocation id (it did not start, or an older node ran it): query by cron_job_id and time"}}
	}
	end := now
	if run.FinishedAt != nil && run.FinishedAt.Add(runLogTrail).Before(now) {
		end = run.FinishedAt.Add(runLogTrail)
	}
	return runWindow{jobID: key.JobID, invocation: run.InvocationID, start: run.StartedAt.Add(-runLogLead), end: end}, nil
}

// parseSince accepts an RFC 3339 time or a duration back from now ("15m");
// the default is one hour.
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return now.Add(-time.Hour), nil
	}
	var start time.Time
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		start = now.Add(-d)
	} else if t, err := time.Parse(time.RFC3339, v); err == nil {
		start = t
	} else {
		return start, invalid("since", "must be an RFC 3339 time or a duration such as 15m")
	}
	if start.After(now) || now.Sub(start) > maxLogWindow {
		return start, invalid("since", "must lie within the last 30 days")
	}
	return start, nil
}
