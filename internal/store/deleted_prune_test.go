package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

// A late outcome recorded under a tombstone while housekeeping
// prunes that tombstone leaves a run without an owner (the history API
// then answers 404 for it).
func TestPruneSkipsATombstoneALateOutcomeHolds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(5)
	f.deleteFully(j.ID)
	pool := f.st.Pool()
	if _, err := pool.Exec(ctx, `UPDATE deleted_cron_jobs SET deleted_at = now() - interval '100 days' WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	// What recordLateOutcome does: lock the tombstone, write the run.
	tx, err := pool.Begin(ctx)
	must(t, err)
	var id string
	must(t, tx.QueryRow(ctx, `SELECT id FROM deleted_cron_jobs WHERE id = $1 FOR UPDATE`, j.ID).Scan(&id))
	slot := time.Now().UTC().Truncate(time.Minute)
	_, err = tx.Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, node_id, scheduled_at, result)
		VALUES ($1, $2, $3, $4, $5, 'success')`, runkey.Scheduled(j.ID, slot), j.ID, j.Version, f.node.ID, slot)
	must(t, err)
	done := make(chan error, 1)
	go func() { _, err := f.st.DeleteRunsBefore(ctx, time.Now().Add(-30*24*time.Hour)); done <- err }()
	// Give housekeeping time to reach the tombstone while its lock is held
	// (it must skip it, not wait and then delete it).
	time.Sleep(500 * time.Millisecond)
	must(t, tx.Commit(ctx))
	must(t, <-done)
	runs := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID)
	tombs := f.count(`SELECT count(*) FROM deleted_cron_jobs WHERE id = $1`, j.ID)
	if runs > 0 && tombs == 0 {
		t.Errorf("%d run(s) of the deleted job left without a tombstone: unreadable through the API", runs)
	}
}
