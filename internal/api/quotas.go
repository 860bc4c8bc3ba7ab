package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/quota"
)

// quotasResponse shows an admin both what is set for the tenant (null:
// the default) and what is in force.
type quotasResponse struct {
	Overrides quota.Overrides `json:"overrides"`
	Limits    quota.Limits    `json:"limits"`
}

func (s *Server) getQuotas(c echo.Context) error {
	tenantID, err := pathID(c, "tenant")
	if err != nil {
		return err
	}
	o, l, err := s.store.TenantQuotas(c.Request().Context(), tenantID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, quotasResponse{o, l})
}

func (s *Server) setQuotas(c echo.Context) error {
	tenantID, err := pathID(c, "tenant")
	if err != nil {
		return err
	}
	var o quota.Overrides
	if err := decodeStrict(c, &o); err != nil {
		return err
	}
	if o.MaxJobs != nil && *o.MaxJobs > quota.MaxJobsCeiling {
		return invalid("max_jobs", "at most %d (the platform's ceiling per tenant)", quota.MaxJobsCeiling)
	}
	for name, v := range map[string]*int{"max_jobs": o.MaxJobs, "min_interval_seconds": o.MinIntervalSeconds,
		"max_timeout_seconds": o.MaxTimeoutSeconds, "max_memory_mb": o.MaxMemoryMB, "run_now_per_minute": o.RunNowPerMinute} {
		if v != nil && (*v < 0 || *v > quota.MaxValue) {
			return invalid(name, "want 0 (no limit) to %d, or null for the default", quota.MaxValue)
		}
	}
	l, err := s.store.SetTenantQuotas(c.Request().Context(), tenantID, o)
	if err != nil {
		return err
	}
	s.log.Info("tenant quotas set", "tenant_id", tenantID, "limits", l)
	return c.JSON(http.StatusOK, quotasResponse{o, l})
}
