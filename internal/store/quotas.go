package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hostcron/hostcron/internal/quota"
)

// DefaultQuotas are the limits of a tenant without overrides until the
// core's config sets its own: a job count that keeps a converge and the
// job list bounded (each job is a unit pair on every node of the shard),
// and run-now and backfill requests a tenant's script cannot turn into a
// flood of runs on every node: 60 at once, a second each after.
var DefaultQuotas = quota.Limits{MaxJobs: 1000, RunNowPerMinute: 60}

// SetQuotaDefaults sets the limits of tenants without overrides.
func (s *Store) SetQuotaDefaults(l quota.Limits) { s.quotaDefaults = &l }

func (s *Store) defaults() quota.Limits {
	if s.quotaDefaults != nil {
		return *s.quotaDefaults
	}
	return DefaultQuotas
}

// TenantQuotas returns a tenant's overrides and the limits in force.
func (s *Store) TenantQuotas(ctx context.Context, tenantID string) (quota.Overrides, quota.Limits, error) {
	o, err := tenantOverrides(ctx, s.pool, tenantID, false)
	if err != nil {
		return o, quota.Limits{}, err
	}
	return o, o.Apply(s.defaults()), nil
}

// SetTenantQuotas replaces a tenant's overrides (nil fields: defaults).
// Jobs over a lowered limit keep running; their next change is held to it.
func (s *Store) SetTenantQuotas(ctx context.Context, tenantID string, o quota.Overrides) (quota.Limits, error) {
	_, err := s.pool.Exec(ctx, `INSERT INTO tenant_quotas (tenant_id, max_jobs, min_interval_seconds, max_timeout_seconds, max_memory_mb,
			run_now_per_minute)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant_id) DO UPDATE SET max_jobs = $2, min_interval_seconds = $3, max_timeout_seconds = $4,
			max_memory_mb = $5, run_now_per_minute = $6, updated_at = now()`,
		tenantID, o.MaxJobs, o.MinIntervalSeconds, o.MaxTimeoutSeconds, o.MaxMemoryMB, o.RunNowPerMinute)
	switch {
	case foreignKeyViolation(err):
		return quota.Limits{}, fmt.Errorf("set quotas: tenant: %w", ErrNotFound)
	case err != nil:
		return quota.Limits{}, fmt.Errorf("set quotas: %w", err)
	}
	return o.Apply(s.defaults()), nil
}

// tenantOverrides reads a tenant's overrides; lock also locks the
// tenant's row, so that concurrent creates count one at a time.
func tenantOverrides(ctx context.Context, q dbtx, tenantID string, lock bool) (quota.Overrides, error) {
	var o quota.Overrides
	sql := `SELECT q.max_jobs, q.min_interval_seconds, q.max_timeout_seconds, q.max_memory_mb, q.run_now_per_minute
		FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id WHERE t.id = $1`
	if lock {
		sql += ` FOR NO KEY UPDATE OF t`
	}
	err := q.QueryRow(ctx, sql, tenantID).Scan(&o.MaxJobs, &o.MinIntervalSeconds, &o.MaxTimeoutSeconds, &o.MaxMemoryMB, &o.RunNowPerMinute)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, fmt.Errorf("tenant quotas: %w", ErrNotFound)
	}
	if err != nil {
		return o, fmt.Errorf("tenant quotas: %w", err)
	}
	return o, nil
}

// checkJobQuota refuses a job past the tenant's max_jobs. It locks the
// tenant's row first and counts in a statement of its own: under READ
// COMMITTED the count sees the jobs of the create that held the lock
// before.
func (s *Store) checkJobQuota(ctx context.Context, tx pgx.Tx, tenantID string) error {
	o, err := tenantOverrides(ctx, tx, tenantID, true)
	if err != nil {
		return fmt.Errorf("create cron job: %w", err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM cron_jobs WHERE tenant_id = $1`, tenantID).Scan(&n); err != nil {
		return fmt.Errorf("create cron job: count jobs: %w", err)
	}
	if e := quota.JobCount(o.Apply(s.defaults()), n); e != nil {
		return e
	}
	return nil
}

// takeRunNow takes a token of the tenant's run-now quota for a run-now or
// backfill, or refuses it (quota.Throttled; nothing is written), in a
// transaction of its own before the request's, which locks the job: a
// request waiting for the tenant's bucket holds no lock on the job's row
// (which its outcomes, edits and the sweeper write; review s21a: a flood
// of refused run-nows held it share-locked back to back), and a request
// holding the bucket never waits for a job's lock (review s21d: one job's
// writer stalled the tenant's run-nows of every job). refund gives the
// token back when the request then surely queued nothing (inTokenTx); a
// crash between the two loses the token, which refills.
//
// The bucket row is locked first, so concurrent requests of one tenant,
// on any core-api replica, take tokens one at a time; the limit is read
// again once the lock is held (a request that waited decides by the limit
// in force, not one an admin lowered meanwhile), and the clock is the
// database's at that moment, one for every replica.
func (s *Store) takeRunNow(ctx context.Context, tenantID string) (refund func(), err error) {
	var limit int
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if limit, err = s.runNowLimit(ctx, tx, tenantID); err != nil || limit <= 0 {
			return err
		}
		// The first request finds no row: a full bucket. Its own
		// statement, so the locking read below (a new snapshot) sees a
		// row another request inserted and committed meanwhile.
		if _, err := tx.Exec(ctx, `INSERT INTO tenant_run_now_buckets (tenant_id, tokens, taken_at)
			VALUES ($1, $2, clock_timestamp()) ON CONFLICT (tenant_id) DO NOTHING`, tenantID, float64(limit)); err != nil {
			return fmt.Errorf("run-now quota: %w", err)
		}
		var b quota.RunNowBucket
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT tokens, taken_at, clock_timestamp() FROM tenant_run_now_buckets
			WHERE tenant_id = $1 FOR UPDATE`, tenantID).Scan(&b.Tokens, &b.At, &now); err != nil {
			return fmt.Errorf("run-now quota: %w", err)
		}
		if limit, err = s.runNowLimit(ctx, tx, tenantID); err != nil || limit <= 0 {
			return err
		}
		next, throttled := quota.TakeRunNow(limit, b, now)
		if throttled != nil {
			return throttled
		}
		if _, err := tx.Exec(ctx, `UPDATE tenant_run_now_buckets SET tokens = $2, taken_at = $3 WHERE tenant_id = $1`,
			tenantID, next.Tokens, next.At); err != nil {
			return fmt.Errorf("run-now quota: %w", err)
		}
		return nil
	})
	if err != nil || limit <= 0 {
		return func() {}, err
	}
	return func() { s.refundRunNow(ctx, tenantID, limit) }, nil
}

// inTokenTx runs the transaction of a run-now or backfill whose token
// takeRunNow took, and gives the token back (refund) only when nothing
// can have been queued (refundable).
func (s *Store) inTokenTx(ctx context.Context, refund func(), fn func(pgx.Tx) error) error {
	committing := false // fn returned nil: BeginFunc sends the COMMIT
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		committing = true
		return nil
	})
	switch {
	case err == nil:
	case refundable(err, committing):
		refund()
	default:
		slog.Warn("a run-now's commit has no known outcome: its token is not given back", "err", err)
	}
	return err
}

// refundable tells whether a failed transaction surely queued nothing:
// it failed before its COMMIT (rolled back), or the server answered the
// COMMIT with an ERROR (a rollback). A COMMIT whose answer was lost (the
// client's context cancelled mid-commit, the connection broken, a FATAL
// after the local commit) may have committed, and a refund would then
// give a tenant who disconnects at the right moment a free run (review
// s21e); the token refills instead.
func refundable(err error, committing bool) bool {
	var pgErr *pgconn.PgError
	return !committing || errors.Is(err, pgx.ErrTxCommitRollback) ||
		errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
}

// refundRunNow gives a token back to the tenant's bucket, up to limit.
// A failure is logged only: the tenant waits for a refill instead.
func (s *Store) refundRunNow(ctx context.Context, tenantID string, limit int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `UPDATE tenant_run_now_buckets SET tokens = least(tokens + 1, $2) WHERE tenant_id = $1`,
		tenantID, float64(limit)); err != nil {
		slog.Warn("give a run-now token back (the tenant waits for a refill instead)", "tenant_id", tenantID, "err", err)
	}
}

// runNowLimit is the tenant's run_now_per_minute in force (0: no limit).
func (s *Store) runNowLimit(ctx context.Context, q dbtx, tenantID string) (int, error) {
	o, err := tenantOverrides(ctx, q, tenantID, false)
	if err != nil {
		return 0, err
	}
	return o.Apply(s.defaults()).RunNowPerMinute, nil
}
