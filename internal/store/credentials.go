package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Credentials are 256-bit random tokens of which only a SHA-256 hash is
// stored. A request is authenticated by looking its token's hash up in a
// unique index, so no stored secret is ever compared byte by byte (the
// bootstrap admin key from the config is compared in constant time by the
// API); the hash of an unguessable token gives an attacker no prefix to
// time.

// MaxRotationGrace bounds how long a rotated credential keeps working.
const MaxRotationGrace = 30 * 24 * time.Hour

// APIKey is who a key speaks for: an admin, or one tenant, optionally read
// only. Its secret is shown once, at creation or rotation.
type APIKey struct {
	ID        string     `json:"id"`
	Scope     string     `json:"scope"` // "admin" or "tenant"
	TenantID  string     `json:"tenant_id,omitempty"`
	Name      string     `json:"name"`
	ReadOnly  bool       `json:"read_only"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // a rotated key stops working then
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// ReplacedBy is the key a rotation issued in this one's place.
	ReplacedBy string `json:"replaced_by,omitempty"`
}

// KeyOptions describe a new key; an empty TenantID makes an admin key.
type KeyOptions struct {
	TenantID string
	Name     string
	ReadOnly bool
}

const keyColumns = `id, scope, tenant_id, name, read_only, created_at, expires_at, revoked_at, replaced_by`

func scanKey(row pgx.Row) (APIKey, error) {
	var k APIKey
	var tid, replaced *string
	err := row.Scan(&k.ID, &k.Scope, &tid, &k.Name, &k.ReadOnly, &k.CreatedAt, &k.ExpiresAt, &k.RevokedAt, &replaced)
	if tid != nil {
		k.TenantID = *tid
	}
	if replaced != nil {
		k.ReplacedBy = *replaced
	}
	return k, err
}

// CreateAPIKey makes a read-write key; tenantID "" makes an admin key.
func (s *Store) CreateAPIKey(ctx context.Context, tenantID string) (APIKey, string, error) {
	return s.CreateAPIKeyWith(ctx, KeyOptions{TenantID: tenantID})
}

// CreateAPIKeyWith makes a key and returns it with its one-time secret.
func (s *Store) CreateAPIKeyWith(ctx context.Context, o KeyOptions) (APIKey, string, error) {
	return s.insertKey(ctx, s.pool, o)
}

func (s *Store) insertKey(ctx context.Context, q dbtx, o KeyOptions) (APIKey, string, error) {
	token, hash := NewToken()
	scope, tid := "admin", (*string)(nil)
	if o.TenantID != "" {
		scope, tid = "tenant", &o.TenantID
	}
	k, err := scanKey(q.QueryRow(ctx,
		`INSERT INTO api_keys (key_hash, scope, tenant_id, name, read_only) VALUES ($1, $2, $3, $4, $5) RETURNING `+keyColumns,
		hash, scope, tid, o.Name, o.ReadOnly))
	switch {
	case foreignKeyViolation(err):
		return k, "", fmt.Errorf("create API key: tenant: %w", ErrNotFound)
	case err != nil:
		return k, "", fmt.Errorf("create API key: %w", err)
	}
	return k, token, nil
}

// APIKeyByToken authenticates an API key: one neither revoked nor past the
// expiry a rotation gave it.
func (s *Store) APIKeyByToken(ctx context.Context, token string) (APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, HashToken(token)))
	return k, notFound(err, "API key")
}

// ListAPIKeys lists keys, without secrets, oldest first; tenantID ""
// lists every key.
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys
		WHERE $1 = '' OR tenant_id::text = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (APIKey, error) { return scanKey(r) })
	if err != nil {
		return nil, fmt.Errorf("list API keys: %w", err)
	}
	return keys, nil
}

// RevokeAPIKey stops a key at once. Revoking a revoked key changes nothing.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) (APIKey, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE id = $1 RETURNING `+keyColumns, id))
	return k, notFound(err, "revoke API key")
}

// ErrKeyNotUsable: a revoked or expired key cannot be rotated (rotation
// would bring a dead key's rights back).
var ErrKeyNotUsable = errors.New("the key is revoked or expired")

// RotateAPIKey issues a key with the same scope, tenant, name and
// read-only flag, and lets the old one work for grace more (never longer
// than it already would). It returns the new key and its secret.
func (s *Store) RotateAPIKey(ctx context.Context, id string, grace time.Duration) (APIKey, string, error) {
	if grace < 0 || grace > MaxRotationGrace {
		return APIKey{}, "", fmt.Errorf("rotate API key: grace %v outside 0..%v", grace, MaxRotationGrace)
	}
	var k APIKey
	var token string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		old, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return notFound(err, "key")
		}
		var usable bool
		if err := tx.QueryRow(ctx, `SELECT revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) FROM api_keys WHERE id = $1`, id).Scan(&usable); err != nil {
			return fmt.Errorf("key: %w", err)
		}
		if !usable {
			return ErrKeyNotUsable
		}
		if k, token, err = s.insertKey(ctx, tx, KeyOptions{TenantID: old.TenantID, Name: old.Name, ReadOnly: old.ReadOnly}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE api_keys SET replaced_by = $2,
			expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $3)) WHERE id = $1`,
			id, k.ID, grace.Seconds())
		return err
	})
	if err != nil {
		return APIKey{}, "", fmt.Errorf("rotate API key %s: %w", id, err)
	}
	return k, token, nil
}

// RotateNodeCredential gives a node a new credential; the old one keeps
// working for grace (0: it stops at once), so the operator can deploy the
// new one first. It returns the node and the new secret.
func (s *Store) RotateNodeCredential(ctx context.Context, id string, grace time.Duration) (Node, string, error) {
	if grace < 0 || grace > MaxRotationGrace {
		return Node{}, "", fmt.Errorf("rotate node credential: grace %v outside 0..%v", grace, MaxRotationGrace)
	}
	token, hash := NewToken()
	n, err := scanNode(s.pool.QueryRow(ctx, `UPDATE nodes SET
			previous_credential_hash = CASE WHEN $3 > 0 THEN credential_hash END,
			previous_credential_expires_at = CASE WHEN $3 > 0 THEN now() + make_interval(secs => $3) END,
			credential_hash = $2, credential_rotated_at = now()
		WHERE id = $1 RETURNING `+nodeColumns, id, hash, grace.Seconds()))
	if err != nil {
		return n, "", notFound(err, "rotate node credential")
	}
	return n, token, nil
}

// RevokeNodeCredential locks a node out at once: its current and previous
// credentials stop working, and only a rotation issues a new one.
func (s *Store) RevokeNodeCredential(ctx context.Context, id string) (Node, error) {
	_, hash := NewToken() // a hash nobody holds the token of
	n, err := scanNode(s.pool.QueryRow(ctx, `UPDATE nodes SET
			previous_credential_hash = NULL, previous_credential_expires_at = NULL,
			credential_hash = $2, credential_rotated_at = now()
		WHERE id = $1 RETURNING `+nodeColumns, id, hash))
	return n, notFound(err, "revoke node credential")
}
