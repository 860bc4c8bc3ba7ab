package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// announce is called by a node agent when it starts: the core records the
// node as seen and converges it to its shard's desired state.
func (s *Server) announce(c echo.Context) error {
	n := nodeOf(c)
	if err := s.store.TouchNode(c.Request().Context(), n.ID); err != nil {
		return err
	}
	if s.cfg.Converger == nil {
		return &apiError{http.StatusServiceUnavailable, ProblemDetail{Code: "unavailable", Message: "no workflow engine configured"}}
	}
	if err := s.cfg.Converger.ConvergeNode(c.Request().Context(), n.ID); err != nil {
		// Temporal is down or not connected yet: the agent retries later.
		s.log.Warn("converge not started", "node", n.Name, "err", err)
		return &apiError{http.StatusServiceUnavailable, ProblemDetail{Code: "unavailable", Message: "workflow engine unreachable"}}
	}
	return c.JSON(http.StatusAccepted, map[string]string{"node_id": n.ID, "node": n.Name, "converge": "started"})
}
