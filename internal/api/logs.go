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
	start, err := parseSince(c.QueryParam("since"), now)
	if err != nil {
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
	lines, err := s.cfg.Logs.QueryRange(c.Request().Context(), logship.CronLogQuery(tenant.Name, jobID, contains), start, now, limit)
	if err != nil {
		s.log.Error("log query failed", "tenant", tenant.Name, "err", err)
		return &apiError{http.StatusBadGateway, ProblemDetail{Code: "log_store", Message: "the log store did not answer"}}
	}
	if lines == nil {
		lines = []logship.Line{}
	}
	return c.JSON(http.StatusOK, map[string]any{"lines": lines, "start": start, "end": now})
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
