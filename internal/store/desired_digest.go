package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// NodeDesiredDigest is the wire.SetDigest of a node's whole desired set
// and its number of jobs (the converge fast path, docs/semantics.md, "The
// desired set's digest"). It reads in one REPEATABLE READ read-only
// transaction, and holds the rows to the same revisions check the pages
// (NodeDesiredPage) are held to, so a set a page read would refuse
// (wire.ErrRevisionsAhead) has no digest either: a node must never skip a
// read whose answer would have been a refusal. ok is false if there is no
// such node.
//
// The rows are first summed up by PostgreSQL itself (setKeySQL: a hash of
// every desired column of every job, computed where the rows are, nothing
// sent but the hash); a shard whose key is the one its digest was last
// computed for answers that digest. Only a changed key reads the jobs and
// digests them (SetDigest sorts and encodes a slice; at 10,000 jobs a few
// MiB and about 90 ms here, against 40-50 ms for the key alone:
// docs/benchmarks.md).
func (s *Store) NodeDesiredDigest(ctx context.Context, nodeID string) (d wire.DesiredDigest, ok bool, err error) {
	ok, err = s.readForNode(ctx, nodeID, func(tx pgx.Tx, shardID string, snap wire.Snapshot) error {
		key, revsSeen, err := setKey(ctx, tx, shardID)
		if err != nil {
			return err
		}
		if cached, hit := s.digests.get(shardID, key); hit && revsSeen {
			d = cached
			return nil
		}
		jobs, err := desiredJobs(ctx, tx, shardID)
		if err != nil {
			return fmt.Errorf("desired digest: %w", err)
		}
		if err := checkRevs(wire.DesiredSet{Jobs: jobs, Snapshot: snap}); err != nil {
			return err
		}
		d = wire.DesiredDigest{Digest: wire.SetDigest(jobs), Jobs: len(jobs)}
		s.digests.put(shardID, key, d)
		return nil
	})
	if err != nil || !ok {
		return wire.DesiredDigest{}, false, err
	}
	return d, true, nil
}

// setKey is the key of a shard's desired set in tx's snapshot (setKeySQL)
// and whether that snapshot sees every job's revision. A cached digest
// answers only if it does: the revisions check of the full read
// (checkRevs) must refuse whenever it would have refused, also where the
// values, and so the key, are those of the cached digest but the cluster
// is not (a logical restore or upgrade behind a running core gives the
// same rows under a younger transaction counter: the review's finding).
//
// DateStyle is set to ISO for the transaction first: in another style a
// timestamptz prints its zone as an abbreviation, and two instants an
// hour apart can print alike across a change of offset (the review:
// MSK, 2014-10-26), while the digest tells them apart. In ISO each
// prints its offset. (TimeZone may differ between sessions: that only
// makes two keys of one set differ, a miss.)
func setKey(ctx context.Context, tx pgx.Tx, shardID string) (key []byte, revsSeen bool, err error) {
	if _, err := tx.Exec(ctx, `SET LOCAL DateStyle = 'ISO'`); err != nil {
		return nil, false, fmt.Errorf("desired set key: %w", err)
	}
	if err := tx.QueryRow(ctx, setKeySQL, shardID).Scan(&key, &revsSeen); err != nil {
		return nil, false, fmt.Errorf("desired set key: %w", err)
	}
	return key, revsSeen, nil
}

// setKeySQL is a SHA-256 over the text of every desired column of every
// job of a shard ($1), in id order: the very rows desiredJobs reads, from
// the same desiredColumns and desiredFrom, so any change to any value a
// digest is made of (a job's, its tenant's, webroot's or shard's) changes
// the key, whatever path wrote it and whether or not it moved version or
// rev. A record's text form quotes what needs quoting and tells NULL from
// empty, so two different sets never join to the same text. The count is
// in it so an empty shard has a key too. The second column is whether
// the snapshot sees every rev (as wire.Snapshot.Sees does; true for an
// empty shard).
const setKeySQL = `SELECT sha256(convert_to(count(*) || E'\n' || coalesce(string_agg(ROW(` + desiredColumns + `)::text, E'\n' ORDER BY j.id), ''), 'UTF8')),
	       coalesce(bool_and(pg_visible_in_snapshot(j.rev, pg_current_snapshot())), true)` +
	desiredFrom + ` WHERE t.shard_id = $1 AND j.status <> 'deleting'`

// digestCache holds, per shard, the digest last computed and the key of
// the rows it was computed from. A hit needs the same key in a later
// snapshot, so the same values and the same digest (SetDigest is a
// function of them), and that snapshot to see every revision (setKey), as
// the full read's revisions check would. Only a digest that passed the
// check is put. Each core replica has its own; a miss costs the key and
// one full read.
type digestCache struct {
	mu      sync.Mutex
	byShard map[string]cachedDigest
	misses  int // computed digests, for tests
}

type cachedDigest struct {
	key    string
	digest wire.DesiredDigest
}

// maxCachedDigests bounds the cache: far above the shards of a platform
// (docs/scale.md: 1,000 nodes in a few hundred shards); past it the cache
// starts over, which costs misses, never a wrong answer.
const maxCachedDigests = 4096

func (c *digestCache) get(shardID string, key []byte) (wire.DesiredDigest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byShard[shardID]
	if !ok || e.key != string(key) {
		return wire.DesiredDigest{}, false
	}
	return e.digest, true
}

func (c *digestCache) put(shardID string, key []byte, d wire.DesiredDigest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.misses++
	if _, known := c.byShard[shardID]; c.byShard == nil || (!known && len(c.byShard) >= maxCachedDigests) {
		c.byShard = make(map[string]cachedDigest)
	}
	c.byShard[shardID] = cachedDigest{key: string(key), digest: d}
}

// forget empties the cache (benchmarks measure a miss with it).
func (c *digestCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byShard = nil
}
