package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// desiredColumns, desiredFrom and desiredDest are the one definition of a
// job as its nodes must have it. Every query that yields a wire.Job
// (DesiredJob, DesiredJobs, JobPlan) is built from them, so a column added
// here reaches all of them.
const (
	desiredColumns = `j.id, t.name, j.version, j.enabled, t.linux_user, t.linux_group, w.path, s.web_storage_dir,
	       j.schedule, j.timezone, j.command, j.working_directory, j.timeout_seconds, j.max_memory_mb,
	       j.not_before`
	desiredFrom = `
	FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id JOIN webroots w ON w.id = j.webroot_id
	JOIN shards s ON s.id = t.shard_id`
)

// desiredDest is where desiredColumns scan to, in their order; a query
// appends the destinations of its own extra columns.
func desiredDest(d *wire.Job) []any {
	return []any{&d.ID, &d.Tenant, &d.Version, &d.Enabled, &d.User, &d.Group, &d.Webroot, &d.WebStorageDir,
		&d.Schedule, &d.Timezone, &d.Command, &d.WorkingDirectory, &d.TimeoutSec, &d.MemoryMaxMB,
		&d.NotBefore}
}

func scanDesired(row pgx.CollectableRow) (wire.Job, error) {
	var d wire.Job
	err := row.Scan(desiredDest(&d)...)
	return d, err
}

// DesiredJob is one job as its shard's nodes must have it, and its shard.
func (s *Store) DesiredJob(ctx context.Context, id string) (wire.Job, string, error) {
	var d wire.Job
	var shardID string
	err := s.pool.QueryRow(ctx, `SELECT `+desiredColumns+`, t.shard_id`+desiredFrom+` WHERE j.id = $1`, id).
		Scan(append(desiredDest(&d), &shardID)...)
	if err != nil {
		return wire.Job{}, "", notFound(err, "desired job")
	}
	return d, shardID, nil
}

// DesiredJobs is every job a node of the shard must have: all but those
// being deleted. Disabled jobs are included, so their timers are stopped.
func (s *Store) DesiredJobs(ctx context.Context, shardID string) ([]wire.Job, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+desiredColumns+desiredFrom+
		` WHERE t.shard_id = $1 AND j.status <> 'deleting' ORDER BY j.id`, shardID)
	if err != nil {
		return nil, fmt.Errorf("desired jobs: %w", err)
	}
	return pgx.CollectRows(rows, scanDesired)
}

// NodeDesiredJobs is DesiredJobs for the shard of a node; ok is false if
// there is no such node (a converge for it can never succeed).
func (s *Store) NodeDesiredJobs(ctx context.Context, nodeID string) (jobs []wire.Job, ok bool, err error) {
	var shardID string
	err = s.pool.QueryRow(ctx, `SELECT shard_id FROM nodes WHERE id = $1`, nodeID).Scan(&shardID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("shard of node %s: %w", nodeID, err)
	}
	jobs, err = s.DesiredJobs(ctx, shardID)
	return jobs, true, err
}
