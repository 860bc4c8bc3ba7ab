package api

import (
	"errors"
	"net/http"
	"regexp"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/units"
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

func (s *Server) createShard(c echo.Context) error {
	var req struct {
		Name          string `json:"name"`
		WebStorageDir string `json:"web_storage_dir"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if len(req.Name) > 63 || !nameRE.MatchString(req.Name) {
		return invalid("name", "want lower-case letters, digits and inner dashes, at most 63")
	}
	if !units.ValidPath(req.WebStorageDir) {
		return invalid("web_storage_dir", "want an absolute clean path of letters, digits and ._-")
	}
	sh, err := s.store.CreateShard(c.Request().Context(), req.Name, req.WebStorageDir)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, sh)
}

func (s *Server) createNode(c echo.Context) error {
	shardID, err := pathID(c, "shard")
	if err != nil {
		return err
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if len(req.Name) > 63 || !nameRE.MatchString(req.Name) {
		return invalid("name", "want lower-case letters, digits and inner dashes, at most 63")
	}
	n, token, err := s.store.CreateNode(c.Request().Context(), shardID, req.Name)
	if err != nil {
		return err
	}
	// The token is shown once; only its hash is stored.
	return c.JSON(http.StatusCreated, struct {
		store.Node
		Credential string `json:"credential"`
	}{n, token})
}

func (s *Server) listNodes(c echo.Context) error {
	shardID, err := pathID(c, "shard")
	if err != nil {
		return err
	}
	if _, err := s.store.GetShard(c.Request().Context(), shardID); err != nil {
		return err
	}
	nodes, err := s.store.ListNodes(c.Request().Context(), shardID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"nodes": nodes})
}

func (s *Server) createTenant(c echo.Context) error {
	var req store.Tenant
	var body struct {
		Name       string `json:"name"`
		ShardID    string `json:"shard_id"`
		LinuxUser  string `json:"linux_user"`
		LinuxGroup string `json:"linux_group"`
	}
	if err := decodeStrict(c, &body); err != nil {
		return err
	}
	req = store.Tenant{Name: body.Name, ShardID: body.ShardID, LinuxUser: body.LinuxUser, LinuxGroup: body.LinuxGroup}
	if req.LinuxGroup == "" {
		req.LinuxGroup = req.LinuxUser
	}
	switch {
	case !units.ValidTenant(req.Name):
		return invalid("name", "want lower-case letters, digits and inner dashes, at most %d", units.MaxTenantLen)
	case !uuidRE.MatchString(req.ShardID):
		return invalid("shard_id", "must be a shard's UUID")
	case !units.ValidUser(req.LinuxUser):
		return invalid("linux_user", "not a valid Linux user name")
	case !units.ValidUser(req.LinuxGroup):
		return invalid("linux_group", "not a valid Linux group name")
	}
	t, err := s.store.CreateTenant(c.Request().Context(), req)
	if errors.Is(err, store.ErrNotFound) {
		return invalid("shard_id", "no such shard")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, t)
}

func (s *Server) createWebroot(c echo.Context) error {
	tenantID, err := pathID(c, "tenant")
	if err != nil {
		return err
	}
	var req struct {
		Path string `json:"path"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if !units.ValidPath(req.Path) {
		return invalid("path", "want an absolute clean path of letters, digits and ._-")
	}
	w, err := s.store.CreateWebroot(c.Request().Context(), tenantID, req.Path)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, w)
}

func (s *Server) createAPIKey(c echo.Context) error {
	var req struct {
		TenantID string `json:"tenant_id"`
	}
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.TenantID != "" && !uuidRE.MatchString(req.TenantID) {
		return invalid("tenant_id", "must be a tenant's UUID, or absent for an admin key")
	}
	k, token, err := s.store.CreateAPIKey(c.Request().Context(), req.TenantID)
	if errors.Is(err, store.ErrNotFound) {
		return invalid("tenant_id", "no such tenant")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, struct {
		store.APIKey
		Key string `json:"key"`
	}{k, token})
}

// drainNode marks a node as leaving: provisioning stops waiting for it,
// and the shard's failed jobs are provisioned again without it.
func (s *Server) drainNode(c echo.Context) error {
	id, err := pathID(c, "node")
	if err != nil {
		return err
	}
	n, requeued, err := s.store.DrainNode(c.Request().Context(), id)
	if err != nil {
		return err
	}
	s.log.Info("node draining", "node", n.Name, "requeued_jobs", requeued)
	return c.JSON(http.StatusOK, struct {
		store.Node
		Requeued int `json:"requeued_jobs"`
	}{n, requeued})
}

// deleteNode removes a node; the shard's failed jobs are provisioned again
// without it. Its units stay on the host, which is being decommissioned.
func (s *Server) deleteNode(c echo.Context) error {
	id, err := pathID(c, "node")
	if err != nil {
		return err
	}
	requeued, err := s.store.DeleteNode(c.Request().Context(), id)
	if err != nil {
		return err
	}
	s.log.Info("node removed", "node_id", id, "requeued_jobs", requeued)
	return c.NoContent(http.StatusNoContent)
}
