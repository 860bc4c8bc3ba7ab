package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
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
	case !wire.ValidID(req.ShardID):
		return invalid("shard_id", "must be a shard's UUID")
	case !units.ValidUser(req.LinuxUser):
		return invalid("linux_user", "not a valid Linux user name")
	case privilegedAccount(req.LinuxUser):
		return invalid("linux_user", "is a system or privileged account")
	case !units.ValidUser(req.LinuxGroup):
		return invalid("linux_group", "not a valid Linux group name")
	case privilegedAccount(req.LinuxGroup):
		return invalid("linux_group", "is a system or privileged group")
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
	if err := s.checkWebrootPlace(c, tenantID, req.Path); err != nil {
		return err
	}
	w, err := s.store.CreateWebroot(c.Request().Context(), tenantID, req.Path)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, w)
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

// privileged are accounts and groups a tenant's command must never run
// as: root, groups that are root in all but name (sudo, disk, docker,
// lxd, shadow, systemd-journal, ...), and the system's service accounts.
var privileged = map[string]bool{
	"root": true, "sudo": true, "adm": true, "wheel": true, "shadow": true, "disk": true, "docker": true,
	"systemd-journal": true, "lxd": true, "kmem": true, "tty": true, "daemon": true, "bin": true, "sys": true,
	"staff": true, "operator": true, "www-data": true, "nobody": true, "nogroup": true, "kvm": true,
	"systemd-network": true, "systemd-resolve": true, "systemd-timesync": true, "messagebus": true,
}

func privilegedAccount(name string) bool { return privileged[name] }

// checkWebrootPlace admits a webroot only below the tenant's own directory
// of its shard's storage, {web_storage_dir}/{tenant name}/, so a tenant's
// command never runs in (and may not write to) another tenant's files.
func (s *Server) checkWebrootPlace(c echo.Context, tenantID, path string) error {
	ctx := c.Request().Context()
	t, err := s.store.GetTenant(ctx, tenantID)
	if err != nil {
		return err
	}
	sh, err := s.store.GetShard(ctx, t.ShardID)
	if err != nil {
		return err
	}
	if !webrootUnder(path, sh.WebStorageDir, t.Name) {
		return invalid("path", "must lie under %s/%s/", sh.WebStorageDir, t.Name)
	}
	return nil
}

// webrootUnder reports whether path is strictly below dir/tenant/. Both
// are clean (units.ValidPath), so a prefix test is exact.
func webrootUnder(path, dir, tenant string) bool {
	return strings.HasPrefix(path, dir+"/"+tenant+"/")
}

// MinAdminKeyLen bounds the bootstrap admin key from below: it is compared
// as given, so it must carry its own entropy.
const MinAdminKeyLen = 32

// ValidateAdminKey refuses a bootstrap admin key that is set but short.
func ValidateAdminKey(key string) error {
	if key != "" && len(key) < MinAdminKeyLen {
		return fmt.Errorf("admin key is %d characters, at least %d required", len(key), MinAdminKeyLen)
	}
	return nil
}
