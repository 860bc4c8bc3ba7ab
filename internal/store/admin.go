package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// Shard is a group of web nodes on one shared storage.
type Shard struct {
	ID            string    `json:"id"`
	Name          string    `json:"name"`
	WebStorageDir string    `json:"web_storage_dir"`
	CreatedAt     time.Time `json:"created_at"`
}

// Node is one web node; it authenticates with a token whose hash is stored.
type Node struct {
	ID         string     `json:"id"`
	ShardID    string     `json:"shard_id"`
	Name       string     `json:"name"`
	LastSeenAt *time.Time `json:"last_seen_at"`
	CreatedAt  time.Time  `json:"created_at"`
	Draining   bool       `json:"draining"` // leaving: provisioning skips it
	// CredentialRotatedAt is when the credential was last rotated or
	// revoked; PreviousCredentialExpiresAt is when the one it replaced
	// stops working (absent once it has).
	CredentialRotatedAt         *time.Time `json:"credential_rotated_at,omitempty"`
	PreviousCredentialExpiresAt *time.Time `json:"previous_credential_expires_at,omitempty"`
}

// Tenant is a hosting customer with a Linux user on its shard's nodes.
type Tenant struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	ShardID    string    `json:"shard_id"`
	LinuxUser  string    `json:"linux_user"`
	LinuxGroup string    `json:"linux_group"`
	CreatedAt  time.Time `json:"created_at"`
}

// Webroot is a directory of a tenant on shared storage.
type Webroot struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Path      string    `json:"path"`
	CreatedAt time.Time `json:"created_at"`
}

const nodeColumns = `id, shard_id, name, last_seen_at, created_at, draining, credential_rotated_at,
	CASE WHEN previous_credential_expires_at > now() THEN previous_credential_expires_at END`

func scanNode(row pgx.Row) (Node, error) {
	var n Node
	err := row.Scan(&n.ID, &n.ShardID, &n.Name, &n.LastSeenAt, &n.CreatedAt, &n.Draining, &n.CredentialRotatedAt, &n.PreviousCredentialExpiresAt)
	return n, err
}

// NewToken returns a random secret and the hash stored for it.
func NewToken() (token string, hash []byte) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	token = hex.EncodeToString(b)
	return token, HashToken(token)
}

// HashToken is how tokens are stored; they are 256-bit random, so a plain
// SHA-256 suffices (no password stretching needed).
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateShard registers a shard.
func (s *Store) CreateShard(ctx context.Context, name, webStorageDir string) (Shard, error) {
	var sh Shard
	err := s.pool.QueryRow(ctx,
		`INSERT INTO shards (name, web_storage_dir) VALUES ($1, $2) RETURNING id, name, web_storage_dir, created_at`,
		name, webStorageDir).Scan(&sh.ID, &sh.Name, &sh.WebStorageDir, &sh.CreatedAt)
	if uniqueViolation(err) {
		return sh, conflict("a shard named %q exists", name)
	}
	if err != nil {
		return sh, fmt.Errorf("create shard: %w", err)
	}
	return sh, nil
}

// GetShard returns one shard.
func (s *Store) GetShard(ctx context.Context, id string) (Shard, error) {
	var sh Shard
	err := s.pool.QueryRow(ctx, `SELECT id, name, web_storage_dir, created_at FROM shards WHERE id = $1`, id).
		Scan(&sh.ID, &sh.Name, &sh.WebStorageDir, &sh.CreatedAt)
	return sh, notFound(err, "get shard")
}

// CreateNode registers a node in a shard and returns its one-time token.
func (s *Store) CreateNode(ctx context.Context, shardID, name string) (Node, string, error) {
	token, hash := NewToken()
	n, err := scanNode(s.pool.QueryRow(ctx,
		`INSERT INTO nodes (shard_id, name, credential_hash) SELECT id, $2, $3 FROM shards WHERE id = $1
		 RETURNING `+nodeColumns, shardID, name, hash))
	switch {
	case uniqueViolation(err):
		return n, "", conflict("a node named %q exists", name)
	case err != nil:
		return n, "", notFound(err, "create node: shard")
	}
	return n, token, nil
}

// NodeByToken authenticates a node: its current credential, or the one a
// rotation replaced while that rotation's grace lasts.
func (s *Store) NodeByToken(ctx context.Context, token string) (Node, error) {
	hash := HashToken(token)
	n, err := scanNode(s.pool.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes
		WHERE credential_hash = $1 OR (previous_credential_hash = $1 AND previous_credential_expires_at > now())`, hash))
	return n, notFound(err, "node by token")
}

// ListNodes lists the nodes of a shard.
func (s *Store) ListNodes(ctx context.Context, shardID string) ([]Node, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE shard_id = $1 ORDER BY name`, shardID)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) { return scanNode(r) })
}

// CreateTenant registers a tenant on a shard. Its Linux user and group
// belong to it alone: two tenants sharing one could read and write each
// other's files and kill each other's runs. An advisory lock serialises
// the check with the insert.
func (s *Store) CreateTenant(ctx context.Context, t Tenant) (Tenant, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('hostcron.tenants.linux_user'))`); err != nil {
			return fmt.Errorf("create tenant: %w", err)
		}
		var owner string
		err := tx.QueryRow(ctx, `SELECT name FROM tenants WHERE linux_user IN ($1, $2) OR linux_group IN ($1, $2) LIMIT 1`,
			t.LinuxUser, t.LinuxGroup).Scan(&owner)
		switch {
		case err == nil:
			return conflict("Linux user or group %q/%q belongs to tenant %q", t.LinuxUser, t.LinuxGroup, owner)
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("create tenant: %w", err)
		}
		return tx.QueryRow(ctx,
			`INSERT INTO tenants (name, shard_id, linux_user, linux_group) SELECT $1, id, $3, $4 FROM shards WHERE id = $2
			 RETURNING id, name, shard_id, linux_user, linux_group, created_at`,
			t.Name, t.ShardID, t.LinuxUser, t.LinuxGroup).
			Scan(&t.ID, &t.Name, &t.ShardID, &t.LinuxUser, &t.LinuxGroup, &t.CreatedAt)
	})
	var ce *ConflictError
	switch {
	case errors.As(err, &ce):
		return t, err
	case uniqueViolation(err):
		return t, conflict("a tenant named %q exists", t.Name)
	case err != nil:
		return t, notFound(err, "create tenant: shard")
	}
	return t, nil
}

// GetTenant returns one tenant.
func (s *Store) GetTenant(ctx context.Context, id string) (Tenant, error) {
	var t Tenant
	err := s.pool.QueryRow(ctx,
		`SELECT id, name, shard_id, linux_user, linux_group, created_at FROM tenants WHERE id = $1`, id).
		Scan(&t.ID, &t.Name, &t.ShardID, &t.LinuxUser, &t.LinuxGroup, &t.CreatedAt)
	return t, notFound(err, "get tenant")
}

// CreateWebroot registers a webroot of a tenant.
func (s *Store) CreateWebroot(ctx context.Context, tenantID, path string) (Webroot, error) {
	var w Webroot
	err := s.pool.QueryRow(ctx,
		`INSERT INTO webroots (tenant_id, path) SELECT id, $2 FROM tenants WHERE id = $1
		 RETURNING id, tenant_id, path, created_at`, tenantID, path).
		Scan(&w.ID, &w.TenantID, &w.Path, &w.CreatedAt)
	switch {
	case uniqueViolation(err):
		return w, conflict("the tenant has a webroot at %q", path)
	case err != nil:
		return w, notFound(err, "create webroot: tenant")
	}
	return w, nil
}

// GetNode returns one node.
func (s *Store) GetNode(ctx context.Context, id string) (Node, error) {
	n, err := scanNode(s.pool.QueryRow(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE id = $1`, id))
	return n, notFound(err, "get node")
}

// AnnounceNode records that a node announced itself (its agent started)
// and re-queues provisioning of the shard's failed jobs this node can
// cure (announceCures): a job whose provisioning failed on this node
// (down, restarting) or found no node on the shard reaches it and becomes
// active, and its lost-run sweep starts with the verdict. A job that
// failed on other nodes only stays failed: this node's start changes
// nothing for it. A job re-queued within RequeueInterval is skipped, so an
// agent that crash-loops does not bump versions (tenants' ETags) and queue
// retries at every start. It returns how many jobs it re-queued.
func (s *Store) AnnounceNode(ctx context.Context, id string) (int, error) {
	var requeued int
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var shardID, name string
		var draining bool
		err := tx.QueryRow(ctx, `UPDATE nodes SET last_seen_at = now() WHERE id = $1 RETURNING shard_id, name, draining`, id).
			Scan(&shardID, &name, &draining)
		if err != nil {
			return notFound(err, "announce node")
		}
		if draining {
			return nil // provisioning does not go to it
		}
		requeued, err = requeueFailed(ctx, tx, shardID, func(message string) bool { return announceCures(message, name) })
		return err
	})
	woke(err)
	return requeued, err
}

// RequeueInterval is how long after a re-queue of a failed job a node's
// announce leaves that job alone: the default node timeout, the time the
// retry it queued may take to reach every node. An agent in a crash loop
// (Restart=always, RestartSec=2) thus re-queues a job at most once per
// interval, not at every start.
const RequeueInterval = 2 * time.Minute

// announceCures reports whether the announce of node name can cure a job
// whose provisioning failed with status message: the shard had no node
// (NoNodeMessage), or the nodes the failure names (wire.NotProvisionedPrefix,
// then "name: cause; ...") include this one. A failure on other nodes only
// is not this node's to cure; a message naming no node (an older format, a
// message of another origin) is left to a drain, a delete or a retry.
func announceCures(message, name string) bool {
	if message == NoNodeMessage {
		return true
	}
	nodes, ok := strings.CutPrefix(message, wire.NotProvisionedPrefix)
	if !ok || name == "" {
		return false
	}
	// Node names have no ':' or space; a cause that happens to hold
	// "; name: " only re-queues once more, within the interval's bound.
	return nodes == name || strings.HasPrefix(nodes, name+": ") || strings.Contains(nodes, "; "+name+": ")
}

// ShardIDs lists every shard.
func (s *Store) ShardIDs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM shards ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list shards: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// DrainNode marks a node as leaving and re-queues provisioning of its
// shard's failed jobs, which may have failed only because of it. It
// returns the node and how many jobs it re-queued. Draining a node that
// already drains changes nothing and re-queues nothing.
func (s *Store) DrainNode(ctx context.Context, id string) (Node, int, error) {
	var n Node
	var requeued int
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var was bool
		if err := tx.QueryRow(ctx, `SELECT draining FROM nodes WHERE id = $1 FOR UPDATE`, id).Scan(&was); err != nil {
			return notFound(err, "drain node")
		}
		var err error
		n, err = scanNode(tx.QueryRow(ctx, `UPDATE nodes SET draining = true WHERE id = $1 RETURNING `+nodeColumns, id))
		if err != nil {
			return notFound(err, "drain node")
		}
		if was {
			return nil
		}
		requeued, err = requeueFailed(ctx, tx, n.ShardID, nil)
		return err
	})
	woke(err)
	return n, requeued, err
}

// DeleteNode removes a node (its runs keep their history without it) and
// re-queues provisioning of its shard's failed jobs. It returns how many
// jobs it re-queued.
func (s *Store) DeleteNode(ctx context.Context, id string) (int, error) {
	var requeued int
	ctx, woke := s.wakeAfterCommit(ctx)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var shardID string
		if err := tx.QueryRow(ctx, `DELETE FROM nodes WHERE id = $1 RETURNING shard_id`, id).Scan(&shardID); err != nil {
			return notFound(err, "delete node")
		}
		var err error
		requeued, err = requeueFailed(ctx, tx, shardID, nil)
		return err
	})
	woke(err)
	return requeued, err
}

// requeueFailed makes failed jobs of the shard pending at a new version
// and queues a retry for each, inside tx; the new version keeps a verdict
// of a provisioning still in flight (with the old node list) from landing.
// With cures (an announce) it takes only the jobs whose status message
// cures accepts and that were not re-queued within RequeueInterval. Without
// (a drain or delete: the shard's node set changed, so any failed job may
// now succeed, and each happens once per node) it takes every failed job.
// Either way it stamps requeued_at.
func requeueFailed(ctx context.Context, tx pgx.Tx, shardID string, cures func(message string) bool) (int, error) {
	rows, err := tx.Query(ctx, `
		SELECT j.id, j.status_message, j.requeued_at > now() - make_interval(secs => $3)
		FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id
		WHERE t.shard_id = $1 AND j.status = $2
		ORDER BY j.id
		FOR UPDATE OF j`, shardID, wire.StatusFailed, RequeueInterval.Seconds())
	if err != nil {
		return 0, fmt.Errorf("requeue failed jobs: %w", err)
	}
	type failedJob struct {
		ID       string
		Message  string
		Recently *bool
	}
	failed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[failedJob])
	if err != nil {
		return 0, fmt.Errorf("requeue failed jobs: %w", err)
	}
	var ids []string
	for _, f := range failed {
		if cures != nil && ((f.Recently != nil && *f.Recently) || !cures(f.Message)) {
			continue
		}
		ids = append(ids, f.ID)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err = tx.Query(ctx, `
		UPDATE cron_jobs SET status = $2, status_message = '', version = version + 1, updated_at = now(), requeued_at = now()
		WHERE id = ANY($1) AND status = $3
		RETURNING `+jobColumns, ids, wire.StatusPending, wire.StatusFailed)
	if err != nil {
		return 0, fmt.Errorf("requeue failed jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CronJob, error) { return scanJob(r) })
	if err != nil {
		return 0, fmt.Errorf("requeue failed jobs: %w", err)
	}
	// The retry is the system's (a node announced itself) or the caller's
	// (an admin drained or removed a node): actorOf(ctx) tells.
	for _, j := range jobs {
		if err := recordEvent(ctx, tx, j, actorOf(ctx), "requeued", nil); err != nil {
			return 0, err
		}
		if err := queueTask(ctx, tx, j.ID, wire.ActionRetry, j.Version); err != nil {
			return 0, err
		}
	}
	return len(jobs), nil
}
