package api

import (
	"math"
	"net/http"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/labstack/echo/v4"
)

// listJobEvents is a job's audit trail, newest first: who changed it and
// what the system did to it, down to its deletion (a deleted job's trail
// stays readable as its runs do). next_before pages on (absent at the end).
func (s *Server) listJobEvents(c echo.Context) error {
	jobID, _, err := s.historyInScope(c)
	if err != nil {
		return err
	}
	limit, before, err := idPageParams(c)
	if err != nil {
		return err
	}
	events, err := s.store.ListJobEvents(c.Request().Context(), jobID, before, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, idPage("events", events, limit, func(e store.JobEvent) int64 { return e.ID }))
}

// idPageParams are the limit (default 50, at most 500) and before (an
// id; 0: from the newest) of a listing paged by descending id.
func idPageParams(c echo.Context) (limit int, before int64, err error) {
	if limit, err = intParam(c, "limit", 50, 1, 500); err != nil {
		return 0, 0, err
	}
	b, err := intParam(c, "before", 0, 1, math.MaxInt)
	return limit, int64(b), err
}

// idPage is the answer of a listing paged by descending id: the items
// under key, and next_before, the id to page on from, unless the page was
// not full (the end).
func idPage[T any](key string, items []T, limit int, id func(T) int64) map[string]any {
	out := map[string]any{key: items}
	if len(items) == limit {
		out["next_before"] = id(items[len(items)-1])
	}
	return out
}
