package store

import "context"

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
// plan and recount tests; RunKeyWhere is runKeyWhere.
var (
	StoredRunQuery = storedRunQuery
	RunKeyWhere    = runKeyWhere
	RecountSQL     = recountSQL
)
