package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// HealthChecker is a dependency /healthz asks about.
type HealthChecker interface {
	Check(ctx context.Context) error
}

// Health is the body of /healthz.
type Health struct {
	Status  string   `json:"status"` // ok or degraded
	Reasons []string `json:"reasons,omitempty"`
}

// healthCheckTimeout bounds each probe, so /healthz answers during an
// outage instead of hanging on it.
const healthCheckTimeout = 2 * time.Second

// healthz answers 200 when the database and Temporal answer and the outbox
// drains; otherwise 503 naming each problem. The API keeps serving what it
// can while degraded.
func (s *Server) healthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), healthCheckTimeout)
	defer cancel()
	var reasons []string
	if err := s.store.Ping(ctx); err != nil {
		reasons = append(reasons, fmt.Sprintf("database unreachable: %v", err))
	} else if r := s.outboxReason(ctx); r != "" {
		reasons = append(reasons, r)
	}
	if s.cfg.Temporal != nil {
		if err := s.cfg.Temporal.Check(ctx); err != nil {
			reasons = append(reasons, fmt.Sprintf("temporal unreachable: %v", err))
		}
	}
	if len(reasons) > 0 {
		return c.JSON(http.StatusServiceUnavailable, Health{Status: "degraded", Reasons: reasons})
	}
	return c.JSON(http.StatusOK, Health{Status: "ok"})
}

// outboxReason names an outbox that does not drain: its oldest
// undispatched change is older than OutboxMaxAge.
func (s *Server) outboxReason(ctx context.Context) string {
	at, ok, err := s.store.OldestPendingTask(ctx)
	if err != nil {
		return fmt.Sprintf("outbox unreadable: %v", err)
	}
	if age := s.now().Sub(at); ok && age > s.cfg.OutboxMaxAge {
		return fmt.Sprintf("outbox: oldest undispatched change is %s old (limit %s)", age.Round(time.Second), s.cfg.OutboxMaxAge)
	}
	return ""
}

// requestDeadline bounds every request, so a database or Loki that does
// not answer ends in a 503, not a hung client.
func requestDeadline(d time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			ctx, cancel := context.WithTimeout(c.Request().Context(), d)
			defer cancel()
			c.SetRequest(c.Request().WithContext(ctx))
			return next(c)
		}
	}
}
