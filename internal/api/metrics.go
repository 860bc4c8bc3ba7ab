package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/metrics"
)

// requestMetrics labels the API's requests; the metrics themselves are
// metrics.Core's, served on the core's metrics listener, not here.
type requestMetrics struct {
	m      *metrics.Core
	routes map[string]struct{} // route templates: the only route label values
}

// middleware times every request by its route template (not its path, to
// keep label cardinality bounded). It hands an error to Echo's error
// handler first, so the status it records is the one the client got (a
// store's not-found is a 404, not the 200 the response held before).
func (r *requestMetrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err) // commits the response; Echo's own call then does nothing
		}
		r.m.Requests.WithLabelValues(methodLabel(c.Request().Method), r.routeLabel(c.Path()),
			strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return nil
	}
}

// methodLabel keeps a client's made-up method out of the label values.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}

// routeLabel accepts only registered route templates; anything else (an
// unmatched path Echo may echo back) is "other".
func (r *requestMetrics) routeLabel(path string) string {
	if _, ok := r.routes[path]; ok {
		return path
	}
	return "other"
}

// setRoutes records the server's route templates once they are registered.
func (r *requestMetrics) setRoutes(routes []*echo.Route) {
	r.routes = map[string]struct{}{}
	for _, rt := range routes {
		r.routes[rt.Path] = struct{}{}
	}
}
