package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// jobPlanQuery is a job as its nodes must have it, its status and its
// shard's nodes (not the draining ones: provisioning does not wait for a
// node that is leaving) in one statement: one round trip per provisioning batch,
// and the three come from one snapshot.
const jobPlanQuery = `SELECT ` + desiredColumns + `, j.status,
	       COALESCE((SELECT json_agg(json_build_object('id', n.id, 'name', n.name) ORDER BY n.name)
	                 FROM nodes n WHERE n.shard_id = t.shard_id AND NOT n.draining), '[]')` + desiredFrom + `
	WHERE j.id = $1`

// JobPlan is what provisioning a job needs: the job as its shard's nodes
// must have it, whether it is being deleted, and the nodes (by name). A
// job that does not exist yields Exists=false and no error: for the
// workflow that is a job deleted meanwhile, not a failure.
func (s *Store) JobPlan(ctx context.Context, jobID string) (wire.JobPlan, error) {
	p := wire.JobPlan{Exists: true}
	var status wire.Status
	err := s.pool.QueryRow(ctx, jobPlanQuery, jobID).Scan(append(desiredDest(&p.Job), &status, &p.Nodes)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return wire.JobPlan{}, nil
	}
	if err != nil {
		return wire.JobPlan{}, fmt.Errorf("job plan %s: %w", jobID, err)
	}
	p.Version = p.Job.Version
	p.Deleting = status == wire.StatusDeleting
	return p, nil
}

// ShardNodeIDs lists the ids of a shard's nodes that are not draining, by
// name.
func (s *Store) ShardNodeIDs(ctx context.Context, shardID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM nodes WHERE shard_id = $1 AND NOT draining ORDER BY name`, shardID)
	if err != nil {
		return nil, fmt.Errorf("shard nodes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("shard nodes: %w", err)
	}
	return ids, nil
}
