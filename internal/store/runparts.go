package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The run history (cron_job_runs) is partitioned by month of scheduled_at
// (migration 027): one partition per UTC month, named
// cron_job_runs_YYYY_MM, and cron_job_runs_default for any run no month
// holds. Housekeeping creates months ahead (EnsureRunPartitions) and drops
// whole months past the retention (RotateRunPartitions); the batched
// DELETE of DeleteRunsBefore then trims the month the cutoff falls in and
// the default partition.

// RunPartitionsAhead is how many months after the current one have a
// partition: housekeeping may be down for weeks before a run falls into
// the default partition.
const RunPartitionsAhead = 3

const runPartitionPrefix = "cron_job_runs_"

// runPartitionName is the partition of the month that starts at month.
func runPartitionName(month time.Time) string {
	return runPartitionPrefix + month.UTC().Format("2006_01")
}

// runPartitionMonth is the month a partition's name stands for; false for
// any other name (the default partition).
func runPartitionMonth(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, runPartitionPrefix)
	if !ok {
		return time.Time{}, false
	}
	m, err := time.Parse("2006_01", rest)
	if err != nil {
		return time.Time{}, false
	}
	return m, true
}

// monthOf is the start (UTC) of the month t falls in.
func monthOf(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// RunPartitionPlan is what a rotation does: the months to create (their
// starts, oldest first) and the partitions to drop (by name).
type RunPartitionPlan struct {
	Create []time.Time
	Drop   []string
}

// planRunPartitions decides a rotation from the partitions there are (by
// name): every month from now's to ahead months later gets one, and a
// month that ends at or before cutoff goes whole (all its slots are older
// than the retention). The month cutoff falls in is kept: the batched
// delete trims it. Names that are no month (the default) are never
// dropped.
func planRunPartitions(existing []string, now, cutoff time.Time, ahead int) RunPartitionPlan {
	var plan RunPartitionPlan
	have := map[time.Time]bool{}
	for _, name := range existing {
		m, ok := runPartitionMonth(name)
		if !ok {
			continue
		}
		have[m] = true
		if !m.AddDate(0, 1, 0).After(cutoff) {
			plan.Drop = append(plan.Drop, name)
		}
	}
	sort.Strings(plan.Drop)
	first := monthOf(now)
	for i := 0; i <= ahead; i++ {
		m := first.AddDate(0, i, 0)
		// A month past the cutoff only: a clock far behind the retention
		// must not create what the same rotation drops.
		if !have[m] && m.AddDate(0, 1, 0).After(cutoff) {
			plan.Create = append(plan.Create, m)
		}
	}
	return plan
}

// partitionLockTimeout bounds how long creating or dropping a month waits
// for its lock: dropping one takes ACCESS EXCLUSIVE on the whole history,
// and a waiting request for it would queue every outcome behind it.
const partitionLockTimeout = "5s"

// RotateRunPartitions creates the months ahead and drops the months that
// end at or before cutoff; it returns how many it created and dropped. A
// month that cannot take its lock in time is left for the next rotation
// (logged), the others go on.
func (s *Store) RotateRunPartitions(ctx context.Context, now, cutoff time.Time) (created, dropped int, err error) {
	return Chores{s.pool}.RotateRunPartitions(ctx, now, cutoff)
}

// RotateRunPartitions is Store.RotateRunPartitions on the chores'
// connection.
func (c Chores) RotateRunPartitions(ctx context.Context, now, cutoff time.Time) (created, dropped int, err error) {
	names, err := c.runPartitions(ctx)
	if err != nil {
		return 0, 0, err
	}
	plan := planRunPartitions(names, now, cutoff, RunPartitionsAhead)
	var errs []error
	for _, m := range plan.Create {
		if err := c.createRunPartition(ctx, m); err != nil {
			errs = append(errs, err)
			continue
		}
		created++
	}
	for _, name := range plan.Drop {
		gone, err := c.dropRunPartition(ctx, name, now.Sub(cutoff))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			slog.Info("dropped a month of run history past the retention", "partition", name)
			dropped++
		}
	}
	return created, dropped, errors.Join(errs...)
}

// runPartitions are the names of the history's partitions.
func (c Chores) runPartitions(ctx context.Context) ([]string, error) {
	rows, err := c.db.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'cron_job_runs'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("run partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("run partitions: %w", err)
	}
	return names, nil
}

// createRunPartition adds the month that starts at month, in one
// transaction. The month is built beside the history and attached, not
// created as a partition directly: runs of that month may already sit in
// the default partition (housekeeping was down, or a report from far
// ahead), which CREATE … PARTITION OF would refuse, forever; they move into
// the new month first. If the process dies midway, the transaction rolls
// back and the runs stay in the default partition.
func (c Chores) createRunPartition(ctx context.Context, month time.Time) error {
	name, from, to := runPartitionName(month), month, month.AddDate(0, 1, 0)
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("create run partition %s: %w", name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	ident := pgx.Identifier{name}.Sanitize()
	// The move names the columns it writes: a generated column (the run's
	// identity, 029) is computed by the new month, never copied into it.
	var columns string
	err = tx.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'cron_job_runs'::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`).Scan(&columns)
	if err != nil {
		return fmt.Errorf("create run partition %s: columns: %w", name, err)
	}
	steps := []struct {
		sql  string
		args []any
	}{
		{`SET LOCAL lock_timeout = '` + partitionLockTimeout + `'`, nil},
		// ATTACH takes ACCESS EXCLUSIVE on the default partition anyway;
		// taking it first means no run of the month can land there
		// between the move below and the attach (which would then fail
		// on every pass), and no upgrade from the move's lock can
		// deadlock with an outcome writing a row the move took.
		{`LOCK TABLE cron_job_runs_default IN ACCESS EXCLUSIVE MODE`, nil},
		{`CREATE TABLE ` + ident + ` (LIKE cron_job_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED)`, nil},
		// Lets ATTACH skip scanning the new month for rows outside it.
		{`ALTER TABLE ` + ident + ` ADD CONSTRAINT ` + pgx.Identifier{name + "_month"}.Sanitize() +
			` CHECK (scheduled_at >= '` + from.Format(time.RFC3339) + `' AND scheduled_at < '` + to.Format(time.RFC3339) + `')`, nil},
		{`WITH moved AS (DELETE FROM cron_job_runs_default WHERE scheduled_at >= $1 AND scheduled_at < $2 RETURNING ` + columns + `)
			INSERT INTO ` + ident + ` (` + columns + `) SELECT ` + columns + ` FROM moved`, []any{from, to}},
		{`ALTER TABLE cron_job_runs ATTACH PARTITION ` + ident + ` FOR VALUES FROM ('` + from.Format(time.RFC3339) +
			`') TO ('` + to.Format(time.RFC3339) + `')`, nil},
		{`ALTER TABLE ` + ident + ` DROP CONSTRAINT ` + pgx.Identifier{name + "_month"}.Sanitize(), nil},
	}
	for _, st := range steps {
		if _, err := tx.Exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("create run partition %s: %w", name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("create run partition %s: %w", name, err)
	}
	return nil
}

// dropRunPartition drops a month of history whole, unless a run in it
// arrived within the retention by the database's clock (received_at is
// the database's now() at arrival). A report for an old slot may arrive
// late (a node's spool, a late real result replacing a lost record), and
// dropping it hours after it was recorded would let the node's resend of
// the same report record the run a second time; such a month stays until
// its last arrival is past the retention (the batched delete trims it
// meanwhile). Measuring arrival on the database's clock also means a host
// clock far ahead cannot drop a month whose runs arrived recently:
// dropping cannot be undone. The history is locked first, so no run
// arrives between the check and the drop. gone says whether it was
// dropped.
func (c Chores) dropRunPartition(ctx context.Context, name string, retention time.Duration) (gone bool, err error) {
	tx, err := c.db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("drop run partition %s: %w", name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+partitionLockTimeout+`'`); err != nil {
		return false, fmt.Errorf("drop run partition %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE cron_job_runs IN ACCESS EXCLUSIVE MODE`); err != nil {
		return false, fmt.Errorf("drop run partition %s: lock the history: %w", name, err)
	}
	var recent bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+ident+` WHERE received_at >= now() - $1::bigint * interval '1 microsecond')`, retention.Microseconds()).Scan(&recent); err != nil {
		return false, fmt.Errorf("drop run partition %s: latest arrival: %w", name, err)
	}
	if recent {
		return false, nil
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+ident); err != nil {
		return false, fmt.Errorf("drop run partition %s: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("drop run partition %s: %w", name, err)
	}
	return true, nil
}
