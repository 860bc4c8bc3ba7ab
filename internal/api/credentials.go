package api

import (
	"errors"
	"net/http"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// maxKeyName bounds a key's label (for people: "billing-sync", "panel").
const maxKeyName = 100

func (s *Server) createAPIKey(c echo.Context) error {
	var req struct {
		TenantID string `json:"tenant_id"`
		Name     string `json:"name"`
		ReadOnly bool   `json:"read_only"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.TenantID != "" && !wire.ValidID(req.TenantID) {
		return invalid("tenant_id", "must be a tenant's UUID, or absent for an admin key")
	}
	if err := checkLabel(req.Name); err != nil {
		return err
	}
	k, token, err := s.store.CreateAPIKeyWith(c.Request().Context(), store.KeyOptions{TenantID: req.TenantID, Name: req.Name, ReadOnly: req.ReadOnly})
	if errors.Is(err, store.ErrNotFound) {
		return invalid("tenant_id", "no such tenant")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, withSecret(k, token))
}

// checkLabel accepts a printable single-line label of bounded length.
func checkLabel(name string) error {
	if len(name) > maxKeyName || !utf8.ValidString(name) {
		return invalid("name", "want at most %d bytes of UTF-8", maxKeyName)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return invalid("name", "want printable characters only")
		}
	}
	return nil
}

// withSecret is a key as shown once: with its secret.
func withSecret(k store.APIKey, token string) any {
	return struct {
		store.APIKey
		Key string `json:"key"`
	}{k, token}
}

func (s *Server) listAPIKeys(c echo.Context) error {
	tenant := c.QueryParam("tenant_id")
	if tenant != "" && !wire.ValidID(tenant) {
		return invalid("tenant_id", "must be a tenant's UUID")
	}
	keys, err := s.store.ListAPIKeys(c.Request().Context(), tenant)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"api_keys": keys})
}

func (s *Server) revokeAPIKey(c echo.Context) error {
	id, err := pathID(c, "key")
	if err != nil {
		return err
	}
	k, err := s.store.RevokeAPIKey(c.Request().Context(), id)
	if err != nil {
		return err
	}
	s.log.Info("API key revoked", "key_id", k.ID, "tenant_id", k.TenantID)
	return c.JSON(http.StatusOK, k)
}

// rotation reads a rotation's grace: how long the old credential keeps
// working (default 0: it stops at once).
func rotation(c echo.Context) (time.Duration, error) {
	var req struct {
		GraceSeconds int64 `json:"grace_seconds"`
	}
	if c.Request().ContentLength != 0 {
		if err := decodeStrict(c, &req); err != nil {
			return 0, err
		}
	}
	if req.GraceSeconds < 0 || time.Duration(req.GraceSeconds)*time.Second > store.MaxRotationGrace {
		return 0, invalid("grace_seconds", "want 0 to %d", int64(store.MaxRotationGrace/time.Second))
	}
	return time.Duration(req.GraceSeconds) * time.Second, nil
}

func (s *Server) rotateAPIKey(c echo.Context) error {
	id, err := pathID(c, "key")
	if err != nil {
		return err
	}
	grace, err := rotation(c)
	if err != nil {
		return err
	}
	k, token, err := s.store.RotateAPIKey(c.Request().Context(), id, grace)
	if errors.Is(err, store.ErrKeyNotUsable) {
		return &apiError{http.StatusConflict, ProblemDetail{Code: "conflict", Message: "the key is revoked or expired; create a new one"}}
	}
	if err != nil {
		return err
	}
	s.log.Info("API key rotated", "old_key_id", id, "key_id", k.ID, "grace", grace)
	return c.JSON(http.StatusCreated, withSecret(k, token))
}

func (s *Server) rotateNodeCredential(c echo.Context) error {
	id, err := pathID(c, "node")
	if err != nil {
		return err
	}
	grace, err := rotation(c)
	if err != nil {
		return err
	}
	n, token, err := s.store.RotateNodeCredential(c.Request().Context(), id, grace)
	if err != nil {
		return err
	}
	s.log.Info("node credential rotated", "node", n.Name, "grace", grace)
	return c.JSON(http.StatusOK, struct {
		store.Node
		Credential string `json:"credential"`
	}{n, token})
}

func (s *Server) revokeNodeCredential(c echo.Context) error {
	id, err := pathID(c, "node")
	if err != nil {
		return err
	}
	n, err := s.store.RevokeNodeCredential(c.Request().Context(), id)
	if err != nil {
		return err
	}
	s.log.Warn("node credential revoked", "node", n.Name)
	return c.JSON(http.StatusOK, n)
}
