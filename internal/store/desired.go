package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

const desiredQuery = `
	SELECT j.id, t.name, j.version, j.enabled, t.linux_user, t.linux_group, w.path, s.web_storage_dir,
	       j.schedule, j.timezone, j.command, j.working_directory, j.timeout_seconds, j.max_memory_mb
	FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id JOIN webroots w ON w.id = j.webroot_id
	JOIN shards s ON s.id = t.shard_id`

func scanDesired(row pgx.CollectableRow) (wire.Job, error) {
	var d wire.Job
	err := row.Scan(&d.ID, &d.Tenant, &d.Version, &d.Enabled, &d.User, &d.Group, &d.Webroot, &d.WebStorageDir,
		&d.Schedule, &d.Timezone, &d.Command, &d.WorkingDirectory, &d.TimeoutSec, &d.MemoryMaxMB)
	return d, err
}

// DesiredJob is one job as its shard's nodes must have it.
func (s *Store) DesiredJob(ctx context.Context, id string) (wire.Job, string, error) {
	rows, err := s.pool.Query(ctx, desiredQuery+` WHERE j.id = $1`, id)
	if err != nil {
		return wire.Job{}, "", fmt.Errorf("desired job: %w", err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDesired)
	if err != nil {
		return d, "", notFound(err, "desired job")
	}
	var shardID string
	if err := s.pool.QueryRow(ctx, `SELECT t.shard_id FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id WHERE j.id = $1`, id).Scan(&shardID); err != nil {
		return d, "", notFound(err, "desired job shard")
	}
	return d, shardID, nil
}

// DesiredJobs is every job a node of the shard must have: all but those
// being deleted. Disabled jobs are included, so their timers are stopped.
func (s *Store) DesiredJobs(ctx context.Context, shardID string) ([]wire.Job, error) {
	rows, err := s.pool.Query(ctx, desiredQuery+` WHERE t.shard_id = $1 AND j.status <> 'deleting' ORDER BY j.id`, shardID)
	if err != nil {
		return nil, fmt.Errorf("desired jobs: %w", err)
	}
	return pgx.CollectRows(rows, scanDesired)
}
