package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LeaderKey names a duty that one core-api replica at a time performs;
// it is the key of a PostgreSQL session advisory lock.
type LeaderKey int64

// HousekeepingLeader is the lock of the lost-run sweeper and history
// pruning ("hcsweep" in ASCII).
const HousekeepingLeader LeaderKey = 0x6863737765657000

// Leader holds a duty's advisory lock on a connection of its own (taken
// out of the pool, so the lock can never leak to another user of the
// connection). The lock lasts as long as the session: if the replica
// dies or its connection breaks, PostgreSQL frees it and another replica
// takes over.
type Leader struct {
	conn *pgx.Conn
	key  LeaderKey
}

// TryLead takes the duty's lock if no one holds it; it returns nil (and no
// error) if another session does.
func (s *Store) TryLead(ctx context.Context, key LeaderKey) (*Leader, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lead: acquire connection: %w", err)
	}
	conn := pc.Hijack()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(key)).Scan(&got); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("lead: try lock: %w", err)
	}
	if !got {
		_ = conn.Close(ctx)
		return nil, nil
	}
	return &Leader{conn: conn, key: key}, nil
}

// Check confirms the session (and so the lock) is still there.
func (l *Leader) Check(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("leader connection lost: %w", err)
	}
	return nil
}

// Release gives the duty up; closing the session frees the lock.
func (l *Leader) Release(ctx context.Context) {
	_ = l.conn.Close(ctx)
}
