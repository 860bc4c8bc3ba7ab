// Package store keeps shards, nodes, tenants, webroots, API keys, cron jobs
// and their run history in PostgreSQL.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hostcron/hostcron/internal/quota"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

var (
	// ErrNotFound: no such row, or none the caller may see.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row is in a state that does not allow the change.
	ErrConflict = errors.New("conflict")
)

// ConflictError carries the reason of a state conflict.
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return e.Reason }
func (e *ConflictError) Unwrap() error { return ErrConflict }

func conflict(format string, args ...any) error {
	return &ConflictError{Reason: fmt.Sprintf(format, args...)}
}

// Store is the PostgreSQL-backed store.
type Store struct {
	pool          *pgxpool.Pool
	quotaDefaults *quota.Limits // nil: DefaultQuotas
	digests       digestCache   // NodeDesiredDigest's, per shard
}

// Open connects to PostgreSQL.
func Open(ctx context.Context, dsn string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse database DSN: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	return &Store{pool: pool}, nil
}

// Close releases all connections.
func (s *Store) Close() { s.pool.Close() }

// Pool exposes the pool for tests and tools.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Migrate brings the schema to the newest version.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), "hostcron_schema_version")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("migrate: load migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// notFound wraps err with context, mapping pgx's no-rows error onto
// ErrNotFound; nil stays nil.
func notFound(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// uniqueViolation reports whether err is a unique-constraint violation.
func uniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// foreignKeyViolation reports whether err is a foreign-key violation.
func foreignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503"
}
