package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// OutboxDepth is how many changes wait undispatched and when the oldest
// was written (ok false: none waits), for the metrics collector. One
// statement on the pending-rows index.
func (s *Store) OutboxDepth(ctx context.Context) (pending int64, oldest time.Time, ok bool, err error) {
	var t *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM cron_job_tasks WHERE dispatched_at IS NULL`).Scan(&pending, &t); err != nil {
		return 0, time.Time{}, false, fmt.Errorf("outbox depth: %w", err)
	}
	if t == nil {
		return pending, time.Time{}, false, nil
	}
	return pending, *t, true, nil
}

// JobShards maps each of ids to its tenant's shard id (a job deleted
// meanwhile is left out), so the sweeper's lost runs are counted by shard.
func (c Chores) JobShards(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := c.db.Query(ctx, `SELECT j.id::text, t.shard_id::text FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id
		WHERE j.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("shards of jobs: %w", err)
	}
	var id, shard string
	if _, err := pgx.ForEachRow(rows, []any{&id, &shard}, func() error { out[id] = shard; return nil }); err != nil {
		return nil, fmt.Errorf("shards of jobs: %w", err)
	}
	return out, nil
}
