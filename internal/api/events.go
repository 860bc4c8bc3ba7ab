package api

import (
	"math"
	"net/http"

	"github.com/labstack/echo/v4"
)

// listJobEvents is a job's audit trail, newest first: who changed it and
// what the system did to it. next_before pages on (absent at the end).
func (s *Server) listJobEvents(c echo.Context) error {
	j, err := s.jobInScope(c)
	if err != nil {
		return err
	}
	limit, err := intParam(c, "limit", 50, 1, 500)
	if err != nil {
		return err
	}
	before, err := intParam(c, "before", 0, 1, math.MaxInt)
	if err != nil {
		return err
	}
	events, err := s.store.ListJobEvents(c.Request().Context(), j.ID, int64(before), limit)
	if err != nil {
		return err
	}
	out := map[string]any{"events": events}
	if len(events) == limit {
		out["next_before"] = events[len(events)-1].ID
	}
	return c.JSON(http.StatusOK, out)
}
