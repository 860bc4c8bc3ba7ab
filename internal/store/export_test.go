package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/wire"
)

// Exec runs any statement on the chores' connection: tests make a duty
// hang with it.
func (c Chores) Exec(ctx context.Context, sql string) error {
	_, err := c.db.Exec(ctx, sql)
	return err
}

// PageRunsSQL is pageRunsSQL, for the plan test.
var PageRunsSQL = pageRunsSQL

// SetSweepBatch sets how many due jobs one sweep transaction claims and
// returns the previous value (tests make batches small).
func SetSweepBatch(n int) int {
	old := sweepBatch
	sweepBatch = n
	return old
}

// StoredRunQuery is storedRunQuery and RecountSQL recountSQL, for the
// plan and recount tests; RunKeyWhere is runKeyWhere, RunningWhere
// runningWhere, RunningSQL the statements of RunningRuns and
// RunningSince, SlotRecorded the sweep's check slotRecorded.
var (
	StoredRunQuery = storedRunQuery
	RunKeyWhere    = runKeyWhere
	RunningWhere   = runningWhere
	RunningSQL     = map[string]string{"RunningRuns": runningRunsSQL, "RunningSince": runningSinceSQL}
	RecountSQL     = recountSQL
	SlotRecorded   = slotRecorded
)

// ReplaceRunSQL is runWrite's statement when it replaces the record of
// o's key found at the slot at.
func ReplaceRunSQL(node Node, jobID string, o Outcome, at time.Time) (string, pgx.NamedArgs) {
	return runWrite(node, jobID, o, &storedRun{At: at}, nil)
}

// ForgetDigests empties NodeDesiredDigest's cache, so the next call reads
// the jobs (the benchmark's miss).
func (s *Store) ForgetDigests() { s.digests.forget() }

// DigestMisses is how many digests NodeDesiredDigest has computed (and
// put in its cache) rather than answered from it.
func (s *Store) DigestMisses() int {
	s.digests.mu.Lock()
	defer s.digests.mu.Unlock()
	return s.digests.misses
}

// PlantDigest puts d in NodeDesiredDigest's cache under the key the
// node's shard has now, as if it had been computed for these very rows
// (a test of what a hit may answer).
func (s *Store) PlantDigest(ctx context.Context, nodeID string, d wire.DesiredDigest) error {
	_, err := s.readForNode(ctx, nodeID, func(tx pgx.Tx, shardID string, _ wire.Snapshot) error {
		key, _, err := setKey(ctx, tx, shardID)
		if err == nil {
			s.digests.put(shardID, key, d)
		}
		return err
	})
	return err
}
