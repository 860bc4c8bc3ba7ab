package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LeaderKey names a duty that one core-api replica at a time performs;
// it is the key of a PostgreSQL session advisory lock.
type LeaderKey int64

// HousekeepingLeader is the lock of the lost-run sweeper and history
// pruning ("hcsweep" in ASCII).
const HousekeepingLeader LeaderKey = 0x6863737765657000

// ErrLeadLost: the leader's session ended (or could not be confirmed) or
// the lead was released; the duty was stopped or never started.
var ErrLeadLost = errors.New("leader lock lost")

// LeaderConfig bounds a leader session. The zero value takes the defaults.
type LeaderConfig struct {
	// Keepalive is how often the lock is confirmed (default 2s), from a
	// pool connection, so a confirmation never waits for a running duty.
	Keepalive time.Duration
	// ConfirmTimeout bounds one confirmation (default 2s). A confirmation
	// that fails or times out ends the lead: a replica that cannot tell
	// whether it leads stops acting as leader.
	ConfirmTimeout time.Duration
	// DutyTimeout bounds one duty on the client (its context) and each of
	// its statements on the server (statement_timeout), so a hung
	// PostgreSQL cannot hold a duty forever (default 2m).
	DutyTimeout time.Duration
	// LockTimeout is the session's lock_timeout: a duty waiting for a row
	// lock gives up after it (default 10s).
	LockTimeout time.Duration
}

func (c LeaderConfig) withDefaults() LeaderConfig {
	if c.Keepalive <= 0 {
		c.Keepalive = 2 * time.Second
	}
	if c.ConfirmTimeout <= 0 {
		c.ConfirmTimeout = 2 * time.Second
	}
	if c.DutyTimeout <= 0 {
		c.DutyTimeout = 2 * time.Minute
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 10 * time.Second
	}
	return c
}

// Settle is how long a new leader waits before its first duty: long enough
// for a previous leader whose session just ended to notice (one keepalive
// period plus a confirmation, and a period of margin) and stop its duty.
func (c LeaderConfig) Settle() time.Duration {
	c = c.withDefaults()
	return 2*c.Keepalive + c.ConfirmTimeout
}

// Leader holds a duty's advisory lock on a connection of its own (taken
// out of the pool, so the lock can never leak to another user of the
// connection). The lock lasts as long as the session.
//
// Duties run on that very session (Do hands them Chores on it), so every
// statement of a duty commits while the lock is held: if the session
// ends, PostgreSQL frees the lock and the duty's next statement fails. A
// replica whose session ended can therefore never write beside the next
// leader. On top of that, the keepalive confirms the lock every Keepalive
// from a pool connection and ends the lead (cancelling a running duty) as
// soon as it cannot, and a new leader waits Settle before its first duty,
// so the old one has stopped before the new one starts.
type Leader struct {
	store *Store
	key   LeaderKey
	cfg   LeaderConfig
	pid   uint32
	ready time.Time // no duty before (Settle after the lock was taken)

	mu   sync.Mutex // one user of conn at a time: a duty, or the close
	conn *pgx.Conn

	ctx    context.Context // ends when the lead ends
	cancel context.CancelFunc
	once   sync.Once
	err    error         // why the lead ended (set before ctx ends)
	closed chan struct{} // the session is closed
}

// TryLead takes the duty's lock if no one holds it; it returns nil (and no
// error) if another session does. The session gets the duty's timeouts,
// and server-side TCP keepalives so that PostgreSQL frees the lock of a
// replica that vanished from the network within about half a minute.
func (s *Store) TryLead(ctx context.Context, key LeaderKey, cfg LeaderConfig) (*Leader, error) {
	cfg = cfg.withDefaults()
	// Taking the lead never waits long: a pool with no free connection or
	// a PostgreSQL that does not answer fails the attempt within
	// LockTimeout (pg_try_advisory_lock itself never waits), and the next
	// tick tries again.
	ctx, cancelTry := context.WithTimeout(ctx, cfg.LockTimeout)
	defer cancelTry()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("lead: acquire connection: %w", err)
	}
	conn := pc.Hijack()
	closeConn := func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}
	settings := fmt.Sprintf(`SET statement_timeout = %d; SET lock_timeout = %d;
		SET idle_in_transaction_session_timeout = %d;
		SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3`,
		cfg.DutyTimeout.Milliseconds(), cfg.LockTimeout.Milliseconds(), cfg.DutyTimeout.Milliseconds())
	if _, err := conn.Exec(ctx, settings); err != nil {
		closeConn()
		return nil, fmt.Errorf("lead: session settings: %w", err)
	}
	// PostgreSQL 14+: a statement still running after the replica gave up
	// on it (its deadline closed the connection) is ended by the server
	// within a second of noticing the closed client, and the lock with it
	// (defence in depth: statement_timeout bounds it anyway).
	var pe *pgconn.PgError
	if _, err := conn.Exec(ctx, `SET client_connection_check_interval = 1000`); err != nil &&
		!(errors.As(err, &pe) && pe.Code == "42704") { // older: unknown parameter
		closeConn()
		return nil, fmt.Errorf("lead: session settings: %w", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(key)).Scan(&got); err != nil {
		closeConn()
		return nil, fmt.Errorf("lead: try lock: %w", err)
	}
	if !got {
		closeConn()
		return nil, nil
	}
	l := &Leader{store: s, key: key, cfg: cfg, conn: conn, pid: conn.PgConn().PID(),
		ready: time.Now().Add(cfg.Settle()), closed: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.keepalive()
	return l, nil
}

// PID is the leader session's backend process id.
func (l *Leader) PID() uint32 { return l.pid }

// Lost is closed when the lead has ended (lost or released); Err says why.
func (l *Leader) Lost() <-chan struct{} { return l.ctx.Done() }

// Err is why the lead ended, nil while it lasts.
func (l *Leader) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return l.err
}

// keepalive confirms the lock every Keepalive until the lead ends.
func (l *Leader) keepalive() {
	t := time.NewTicker(l.cfg.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		if err := l.confirm(); err != nil {
			l.end(err)
			return
		}
	}
}

// confirm asks PostgreSQL, on a pool connection, whether the leader's
// backend still holds the lock (the backend's pid names one session of
// the cluster, so this is the lock in this database).
func (l *Leader) confirm() error {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.ConfirmTimeout)
	defer cancel()
	var held bool
	err := l.store.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND pid = $1 AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $2)`,
		int32(l.pid), int64(l.key)).Scan(&held)
	switch {
	case err != nil:
		return fmt.Errorf("%w: cannot confirm the lock: %v", ErrLeadLost, err)
	case !held:
		return fmt.Errorf("%w: session %d no longer holds it", ErrLeadLost, l.pid)
	}
	return nil
}

// end ends the lead once: it cancels a running duty and, after the duty
// has let go of the connection, unlocks and closes the session. The
// explicit unlock frees the lock before end's caller goes on (a closed
// session frees it only once its backend has exited), should PostgreSQL
// still hold it.
func (l *Leader) end(cause error) {
	l.once.Do(func() {
		l.err = cause
		l.cancel()
		go func() {
			defer close(l.closed)
			l.mu.Lock()
			defer l.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if !l.conn.IsClosed() {
				_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(l.key))
			}
			_ = l.conn.Close(ctx)
		}()
	})
}

// Do runs duty on the leader's session, once the lead has settled,
// bounded by DutyTimeout and cancelled if the lead ends meanwhile. It
// returns an error wrapping ErrLeadLost if the lead ended before or
// during the duty; the Leader is then spent.
func (l *Leader) Do(ctx context.Context, duty func(context.Context, Chores) error) error {
	if wait := time.Until(l.ready); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.ctx.Done():
			return l.Err()
		case <-t.C:
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return l.Err()
	}
	dctx, cancel := context.WithTimeout(ctx, l.cfg.DutyTimeout)
	defer cancel()
	stop := context.AfterFunc(l.ctx, cancel)
	defer stop()
	err := duty(dctx, Chores{l.conn})
	switch {
	case l.ctx.Err() != nil:
		return errors.Join(l.Err(), err)
	case l.conn.IsClosed():
		// The session broke (a cancelled statement closes it, too): the
		// lock is gone with it.
		cause := fmt.Errorf("%w: session closed during the duty: %v", ErrLeadLost, err)
		l.end(cause)
		return cause
	}
	return err
}

// Release gives the duty up; closing the session frees the lock. It waits
// (while ctx lasts) for a running duty to stop.
func (l *Leader) Release(ctx context.Context) {
	l.end(fmt.Errorf("%w: released", ErrLeadLost))
	select {
	case <-l.closed:
	case <-ctx.Done():
	}
}

// Chores are the housekeeping statements, run on the connection they were
// made for: the leader's session (Leader.Do), or the pool (Store's
// methods of the same names, for tools and tests).
type Chores struct{ db dbtx }

// dbtx is what both a pool and one connection offer.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Ping runs an empty statement: a duty that only proves the session.
func (c Chores) Ping(ctx context.Context) error {
	if _, err := c.db.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}
