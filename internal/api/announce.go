package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// announce is called by a node agent when it starts: the core records the
// node as seen, re-queues provisioning of the shard's failed jobs this
// node's start can cure (they failed on this node, or because the shard
// had no node; at most once per store.RequeueInterval each) and converges
// it to its shard's desired state.
func (s *Server) announce(c echo.Context) error {
	n := nodeOf(c)
	requeued, err := s.store.AnnounceNode(c.Request().Context(), n.ID)
	if err != nil {
		return err
	}
	if requeued > 0 {
		s.log.Info("node announced; failed jobs of its shard re-queued", "node", n.Name, "requeued_jobs", requeued)
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
