package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// desiredColumns, desiredFrom and desiredDest are the one definition of a
// job as its nodes must have it. Every query that yields a wire.Job
// (DesiredJob, DesiredJobs, JobPlan) is built from them, so a column added
// here reaches all of them.
const (
	// rev is xid8, which pgx does not know; as numeric it scans into
	// wire.Job's uint64.
	desiredColumns = `j.id, t.name, j.version, j.enabled, t.linux_user, t.linux_group, w.path, s.web_storage_dir,
	       j.schedule, j.timezone, j.command, j.working_directory, j.timeout_seconds, j.max_memory_mb,
	       j.not_before, j.rev::text::numeric, j.environment, j.catchup_window_seconds, j.overlap_policy`
	desiredFrom = `
	FROM cron_jobs j JOIN tenants t ON t.id = j.tenant_id JOIN webroots w ON w.id = j.webroot_id
	JOIN shards s ON s.id = t.shard_id`
)

// desiredDest is where desiredColumns scan to, in their order; a query
// appends the destinations of its own extra columns.
func desiredDest(d *wire.Job) []any {
	return []any{&d.ID, &d.Tenant, &d.Version, &d.Enabled, &d.User, &d.Group, &d.Webroot, &d.WebStorageDir,
		&d.Schedule, &d.Timezone, &d.Command, &d.WorkingDirectory, &d.TimeoutSec, &d.MemoryMaxMB,
		&d.NotBefore, &d.Rev, &d.Environment, &d.CatchUpWindowSec, &d.OverlapPolicy}
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
	return desiredJobs(ctx, s.pool, shardID)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func desiredJobs(ctx context.Context, q querier, shardID string) ([]wire.Job, error) {
	rows, err := q.Query(ctx, `SELECT `+desiredColumns+desiredFrom+
		` WHERE t.shard_id = $1 AND j.status <> 'deleting' ORDER BY j.id`, shardID)
	if err != nil {
		return nil, fmt.Errorf("desired jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, scanDesired)
	if err != nil {
		return nil, fmt.Errorf("desired jobs: %w", err)
	}
	return jobs, nil
}

// NodeDesiredJobs is DesiredJobs for the shard of a node, with the
// snapshot it was read in; ok is false if there is no such node (a
// converge for it can never succeed). One REPEATABLE READ transaction
// makes the snapshot the one the jobs were read in: a node decides what
// is an orphan by it (docs/semantics.md, "Orphans, snapshots and
// tombstones").
func (s *Store) NodeDesiredJobs(ctx context.Context, nodeID string) (set wire.DesiredSet, ok bool, err error) {
	ok, err = s.readForNode(ctx, nodeID, func(tx pgx.Tx, shardID string, snap wire.Snapshot) error {
		jobs, err := desiredJobs(ctx, tx, shardID)
		if err != nil {
			return err
		}
		set = wire.DesiredSet{Jobs: jobs, Snapshot: snap}
		return checkRevs(set)
	})
	if err != nil || !ok {
		return wire.DesiredSet{}, false, err
	}
	return set, true, nil
}

// readForNode runs read for the shard of a node in one REPEATABLE READ,
// read-only transaction, handing it the snapshot taken first: the one
// read's queries see, which a node judges orphans by. ok is false if
// there is no such node (read does not run).
func (s *Store) readForNode(ctx context.Context, nodeID string, read func(tx pgx.Tx, shardID string, snap wire.Snapshot) error) (ok bool, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var shardID string
		err := tx.QueryRow(ctx, `SELECT shard_id FROM nodes WHERE id = $1`, nodeID).Scan(&shardID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("shard of node %s: %w", nodeID, err)
		}
		ok = true
		snap, err := currentSnapshot(ctx, tx)
		if err != nil {
			return err
		}
		return read(tx, shardID, snap)
	})
	return ok, err
}

// checkRevs refuses a set with a job whose revision its own snapshot
// has not seen (wire.ErrRevisionsAhead).
func checkRevs(set wire.DesiredSet) error {
	for _, j := range set.Jobs {
		if !set.Snapshot.Sees(j.Rev) {
			return fmt.Errorf("%w: job %s has rev %d, its snapshot is %d:%d (a logical restore or upgrade?)",
				wire.ErrRevisionsAhead, j.ID, j.Rev, set.Snapshot.Xmin, set.Snapshot.Xmax)
		}
	}
	return nil
}

// currentSnapshot is the transaction's snapshot (under REPEATABLE READ the
// one every statement of it reads in).
func currentSnapshot(ctx context.Context, tx pgx.Tx) (wire.Snapshot, error) {
	var text string
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&text); err != nil {
		return wire.Snapshot{}, fmt.Errorf("current snapshot: %w", err)
	}
	return parseSnapshot(text)
}

// parseSnapshot reads pg_snapshot's text form, xmin:xmax:xip,xip,...
func parseSnapshot(text string) (wire.Snapshot, error) {
	parts := strings.Split(text, ":")
	if len(parts) != 3 {
		return wire.Snapshot{}, fmt.Errorf("snapshot %q: not xmin:xmax:xip", text)
	}
	var snap wire.Snapshot
	var err error
	if snap.Xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot %q: xmin: %w", text, err)
	}
	if snap.Xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return wire.Snapshot{}, fmt.Errorf("snapshot %q: xmax: %w", text, err)
	}
	for _, x := range strings.Split(parts[2], ",") {
		if x == "" {
			continue
		}
		id, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return wire.Snapshot{}, fmt.Errorf("snapshot %q: xip: %w", text, err)
		}
		snap.Xip = append(snap.Xip, id)
	}
	return snap, nil
}
