package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// NodeDesiredDigest is the wire.SetDigest of a node's whole desired set
// and its number of jobs (the converge fast path, docs/semantics.md, "The
// desired set's digest"). It reads the same rows the pages do
// (NodeDesiredPage), in one REPEATABLE READ read-only transaction, and
// holds them to the same revisions check, so a set a page read would
// refuse (wire.ErrRevisionsAhead) has no digest either: a node must never
// skip a read whose answer would have been a refusal. ok is false if there
// is no such node.
//
// The jobs are held only while they are digested (SetDigest sorts and
// encodes a slice); at 10,000 jobs that is a few MiB, less than one full
// page read's decoded pages on the node.
func (s *Store) NodeDesiredDigest(ctx context.Context, nodeID string) (d wire.DesiredDigest, ok bool, err error) {
	ok, err = s.readForNode(ctx, nodeID, func(tx pgx.Tx, shardID string, snap wire.Snapshot) error {
		jobs, err := desiredJobs(ctx, tx, shardID)
		if err != nil {
			return fmt.Errorf("desired digest: %w", err)
		}
		if err := checkRevs(wire.DesiredSet{Jobs: jobs, Snapshot: snap}); err != nil {
			return err
		}
		d = wire.DesiredDigest{Digest: wire.SetDigest(jobs), Jobs: len(jobs)}
		return nil
	})
	if err != nil || !ok {
		return wire.DesiredDigest{}, false, err
	}
	return d, true, nil
}
