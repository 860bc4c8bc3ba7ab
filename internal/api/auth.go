package api

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/store"
)

// principal is who a request speaks for.
type principal struct {
	admin    bool
	tenantID string // set for tenant-scoped keys
	readOnly bool   // only reads (GET, HEAD) are allowed
}

// canSee reports whether the principal may see a tenant's resources.
func (p principal) canSee(tenantID string) bool { return p.admin || p.tenantID == tenantID }

const (
	ctxPrincipal = "hostcron.principal"
	ctxNode      = "hostcron.node"
)

// requireKey authenticates X-API-Key: the configured bootstrap admin key,
// or a key stored in the database.
func (s *Server) requireKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		key := c.Request().Header.Get("X-API-Key")
		if key == "" {
			return errUnauthorized
		}
		if s.cfg.AdminKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.AdminKey)) == 1 {
			c.Set(ctxPrincipal, principal{admin: true})
			actedBy(c, "admin")
			return next(c)
		}
		k, err := s.store.APIKeyByToken(c.Request().Context(), key)
		if errors.Is(err, store.ErrNotFound) {
			return errUnauthorized
		}
		if err != nil {
			return err
		}
		p := principal{admin: k.Scope == "admin", tenantID: k.TenantID, readOnly: k.ReadOnly}
		if p.readOnly && !readMethod(c.Request().Method) {
			return errReadOnly
		}
		c.Set(ctxPrincipal, p)
		actedBy(c, "key:"+k.ID)
		return next(c)
	}
}

// actedBy names the request's actor for the jobs' audit trail.
func actedBy(c echo.Context, actor string) {
	c.SetRequest(c.Request().WithContext(store.WithActor(c.Request().Context(), actor)))
}

// readMethod: the methods a read-only key may use; every route that
// changes something is a POST, PUT or DELETE.
func readMethod(m string) bool { return m == http.MethodGet || m == http.MethodHead }

func who(c echo.Context) principal { return c.Get(ctxPrincipal).(principal) }

// requireAdmin lets only admin keys through.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !who(c).admin {
			return errForbidden
		}
		return next(c)
	}
}

// requireNode authenticates a node by its bearer token.
func (s *Server) requireNode(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			return errUnauthorized
		}
		n, err := s.store.NodeByToken(c.Request().Context(), token)
		if errors.Is(err, store.ErrNotFound) {
			return errUnauthorized
		}
		if err != nil {
			return err
		}
		c.Set(ctxNode, n)
		return next(c)
	}
}

func nodeOf(c echo.Context) store.Node { return c.Get(ctxNode).(store.Node) }
