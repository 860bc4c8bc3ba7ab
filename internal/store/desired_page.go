package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

const nilUUID = "00000000-0000-0000-0000-000000000000"

// NodeDesiredPage is one page of a node's desired set (docs/semantics.md,
// "Paged desired sets"): at most limit jobs of the node's shard whose id
// sorts after the cursor after ("" for the first page), in id order, with
// the snapshot they were read in. Keyset, not offset: a job created or
// deleted meanwhile shifts no other job across a page boundary, so every
// id is answered for by exactly one page, the one whose range holds it,
// and in that page's snapshot. ok is false if there is no such node.
// Page.Next is the page's last id when more jobs follow.
func (s *Store) NodeDesiredPage(ctx context.Context, nodeID, after string, limit int) (page wire.DesiredPage, ok bool, err error) {
	if limit < 1 || limit > wire.MaxDesiredPageSize {
		return wire.DesiredPage{}, false, fmt.Errorf("desired page: limit %d outside 1..%d", limit, wire.MaxDesiredPageSize)
	}
	ok, err = s.readForNode(ctx, nodeID, func(tx pgx.Tx, shardID string, snap wire.Snapshot) error {
		page.Snapshot = snap
		// One row more than the page tells whether another page follows.
		// The first page starts after the nil UUID, which no job has
		// (gen_random_uuid makes version 4 ids).
		if after == "" {
			after = nilUUID
		}
		rows, err := tx.Query(ctx, `SELECT `+desiredColumns+desiredFrom+
			` WHERE t.shard_id = $1 AND j.status <> 'deleting' AND j.id > $2::uuid ORDER BY j.id LIMIT $3`,
			shardID, after, limit+1)
		if err != nil {
			return fmt.Errorf("desired page: %w", err)
		}
		if page.Jobs, err = pgx.CollectRows(rows, scanDesired); err != nil {
			return fmt.Errorf("desired page: %w", err)
		}
		if len(page.Jobs) > limit {
			page.Jobs = page.Jobs[:limit]
			page.Next = page.Jobs[limit-1].ID
		}
		return checkRevs(wire.DesiredSet{Jobs: page.Jobs, Snapshot: page.Snapshot})
	})
	if err != nil || !ok {
		return wire.DesiredPage{}, false, err
	}
	if page.Jobs == nil {
		page.Jobs = []wire.Job{}
	}
	return page, true, nil
}
