package store

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// Task is an outbox entry for the workflows.
type Task struct {
	ID        int64       `json:"id"`
	CronJobID string      `json:"cron_job_id"`
	Action    wire.Action `json:"action"`
	Version   int64       `json:"version"`
	RunKey    string      `json:"run_key,omitempty"` // the run a cancel stops
	CreatedAt time.Time   `json:"created_at"`
	Attempts  int         `json:"attempts"` // failed sends so far
}

// OutboxChannel is the channel every queued task is announced on
// (LISTEN/NOTIFY), with an empty payload: the dispatchers claim what is
// due, they need no detail.
const OutboxChannel = "hostcron_outbox"

// Waking the dispatchers. The notify is a statement of its own once the
// queuing transaction has committed, not part of that transaction: at
// commit PostgreSQL takes one database-wide lock for its notification
// queue and holds it through the commit's WAL flush, so every transaction
// that notifies commits after every other one (a review measured 16
// sessions queuing tasks 5x slower with it), and job writes of one
// tenant would queue behind another's. A wake that is lost (the core dies
// between commit and notify) costs one fallback poll.

// wakeKey marks a context whose store method wakes the dispatchers after
// its commit (wakeAfterCommit).
type wakeKey struct{}

// pendingWake records that a transaction queued a task.
type pendingWake struct{ queued bool }

// wakeAfterCommit prepares ctx for a transaction that may queue tasks;
// call done with the transaction's error once it has ended: it wakes the
// dispatchers if a task was committed.
func (s *Store) wakeAfterCommit(ctx context.Context) (context.Context, func(error)) {
	w := &pendingWake{}
	return context.WithValue(ctx, wakeKey{}, w), func(err error) {
		if err == nil && w.queued {
			s.wakeDispatchers(ctx)
		}
	}
}

// wakeDispatchers notifies OutboxChannel. A failure is logged only: the
// task is committed, and the dispatchers' poll finds it.
func (s *Store) wakeDispatchers(ctx context.Context) {
	// The task is committed whether or not the request that queued it is
	// still there to hear about it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, '')`, OutboxChannel); err != nil {
		slog.Warn("notify the outbox dispatchers (their poll finds the task)", "err", err)
	}
}

// taskQueued notes, inside the queuing transaction, that it queued a task.
// A caller that did not prepare its context with wakeAfterCommit gets the
// notify inside the transaction (delivered at commit, dropped on
// rollback): correct, only slower under concurrent writes.
func taskQueued(ctx context.Context, tx pgx.Tx) error {
	if w, ok := ctx.Value(wakeKey{}).(*pendingWake); ok {
		w.queued = true
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, OutboxChannel); err != nil {
		return fmt.Errorf("notify the outbox dispatchers: %w", err)
	}
	return nil
}

// ClaimTasks leases up to limit outbox tasks to the caller for lease. Only
// the oldest undispatched task of each job is eligible, and only once its
// backoff has passed and no other dispatcher holds it, so two dispatchers
// never send the same task at once and one job's tasks go out in id
// order. A task whose not_before (a retry's delay) lies ahead is no
// job's head meanwhile: it waits without holding up the job's later
// changes, and goes out once due (by the dispatchers' poll: it is not
// announced then), in id order with whatever is queued by that time. The claim is one statement: SKIP LOCKED passes over rows another
// dispatcher is claiming, and the re-check of claimed_until on the locked
// row passes over rows it claimed since our snapshot.
func (s *Store) ClaimTasks(ctx context.Context, limit int, lease time.Duration) ([]Task, error) {
	rows, err := s.pool.Query(ctx, `
		WITH heads AS (
			SELECT min(id) AS id FROM cron_job_tasks
			WHERE dispatched_at IS NULL AND (not_before IS NULL OR not_before <= now())
			GROUP BY cron_job_id
		), due AS (
			SELECT t.id FROM cron_job_tasks t JOIN heads h ON h.id = t.id
			WHERE t.dispatched_at IS NULL AND t.next_attempt_at <= now()
			  AND (t.claimed_until IS NULL OR t.claimed_until < now())
			ORDER BY t.id LIMIT $1
			FOR UPDATE OF t SKIP LOCKED
		)
		UPDATE cron_job_tasks t SET claimed_until = now() + $2::interval
		FROM due WHERE t.id = due.id
		RETURNING t.id, t.cron_job_id, t.action, t.version, t.run_key, t.created_at, t.attempts`, limit, lease)
	if err != nil {
		return nil, fmt.Errorf("claim outbox tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Task])
	if err != nil {
		return nil, fmt.Errorf("claim outbox tasks: %w", err)
	}
	slices.SortFunc(tasks, func(a, b Task) int { return cmp.Compare(a.ID, b.ID) })
	return tasks, nil
}

// MarkDispatched records that a task was handed to the workflows.
func (s *Store) MarkDispatched(ctx context.Context, id int64) error {
	if _, err := s.pool.Exec(ctx, `UPDATE cron_job_tasks SET dispatched_at = now(), claimed_until = NULL WHERE id = $1`, id); err != nil {
		return fmt.Errorf("mark task %d dispatched: %w", id, err)
	}
	return nil
}

// RetryTask gives a claimed task back after a failed send; it is due again
// after retryIn. countAttempt is false when the failure was not the task's
// (Temporal unreachable), so an outage does not lengthen its backoff.
func (s *Store) RetryTask(ctx context.Context, id int64, retryIn time.Duration, countAttempt bool, cause string) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE cron_job_tasks SET claimed_until = NULL, next_attempt_at = now() + $2::interval,
		       attempts = attempts + CASE WHEN $3 THEN 1 ELSE 0 END, last_error = $4
		WHERE id = $1 AND dispatched_at IS NULL`, id, retryIn, countAttempt, cause)
	if err != nil {
		return fmt.Errorf("retry task %d: %w", id, err)
	}
	return nil
}

// PruneDispatched deletes tasks dispatched before cutoff; it returns how
// many it deleted.
func (s *Store) PruneDispatched(ctx context.Context, cutoff time.Time) (int64, error) {
	return Chores{s.pool}.PruneDispatched(ctx, cutoff)
}

// PruneDispatched is Store.PruneDispatched on the chores' connection.
func (c Chores) PruneDispatched(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := c.db.Exec(ctx, `DELETE FROM cron_job_tasks WHERE dispatched_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("prune dispatched tasks: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OldestPendingTask is when the oldest undispatched task was written (a
// delayed one's, when it is due: it does not wait before); ok is false
// when none waits.
func (s *Store) OldestPendingTask(ctx context.Context) (at time.Time, ok bool, err error) {
	var t *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(greatest(created_at, not_before)) FROM cron_job_tasks WHERE dispatched_at IS NULL`).Scan(&t); err != nil {
		return time.Time{}, false, fmt.Errorf("oldest pending task: %w", err)
	}
	if t == nil {
		return time.Time{}, false, nil
	}
	return *t, true, nil
}

// OutboxListenerName is the application_name of a dispatcher's listening
// session, so an operator (or a test) can find it in pg_stat_activity.
const OutboxListenerName = "hostcron-outbox-listener"

// OutboxListener is a session of its own, outside the pool, that LISTENs
// on OutboxChannel. It is one connection per dispatcher, held for as long
// as it works: a pool connection would go back to the pool still
// listening.
type OutboxListener struct {
	conn *pgx.Conn
}

// ListenOutbox opens a listening session on the store's database.
func (s *Store) ListenOutbox(ctx context.Context) (*OutboxListener, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = OutboxListenerName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("outbox listener: connect: %w", err)
	}
	l := &OutboxListener{conn: conn}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{OutboxChannel}.Sanitize()); err != nil {
		l.Close()
		return nil, fmt.Errorf("outbox listener: listen: %w", err)
	}
	return l, nil
}

// Wait returns nil once a task was queued since the last Wait (at once if
// one was announced meanwhile), ctx's error when ctx ends first (the
// session stays usable), and any other error when the session is gone.
func (l *OutboxListener) Wait(ctx context.Context) error {
	if _, err := l.conn.WaitForNotification(ctx); err != nil {
		return fmt.Errorf("outbox listener: wait: %w", err)
	}
	return nil
}

// Ping checks that the session still answers: a session whose server or
// network vanished silently would otherwise wait for ever.
func (l *OutboxListener) Ping(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("outbox listener: ping: %w", err)
	}
	return nil
}

// Close ends the session (and with it the LISTEN).
func (l *OutboxListener) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.conn.Close(ctx)
}
