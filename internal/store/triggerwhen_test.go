package store_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The row triggers of cron_jobs as they were before migration 028: one
// trigger per function for INSERT and UPDATE, without WHEN (004, 011).
const cronJobsTriggersBefore028 = `
	DROP TRIGGER cron_jobs_rev_insert ON cron_jobs;
	DROP TRIGGER cron_jobs_rev_update ON cron_jobs;
	DROP TRIGGER cron_jobs_sweep_due_insert ON cron_jobs;
	DROP TRIGGER cron_jobs_sweep_due_update ON cron_jobs;
	CREATE TRIGGER cron_jobs_rev BEFORE INSERT OR UPDATE ON cron_jobs
		FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_rev();
	CREATE TRIGGER cron_jobs_sweep_due BEFORE INSERT OR UPDATE ON cron_jobs
		FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_sweep_due();`

// triggerWrite is a write of a job row: inserted with status, enabled and
// swept_until (nil: NULL), then setup and write run with $1 the job's id
// and $2 a fixed time.
type triggerWrite struct {
	name    string
	status  string
	enabled bool
	swept   bool // swept_until = $2 at insert, else NULL
	setup   string
	write   string // "" : the insert is the write
	// plpgsqlAfter028 is whether the write calls a trigger function
	// after migration 028 (the sweep's and the cursor's writes must not).
	plpgsqlAfter028 bool
}

// Migration 028 gives the triggers of cron_jobs WHEN conditions: every
// write must leave exactly the row it left before (rev, sweep_due_at and
// every other column), and the sweep's writes and the outcome's cursor
// move must call no plpgsql. Each write runs twice in a transaction that
// is rolled back: with the triggers of 028 and with those before it
// (restored in the transaction); the rows after the insert and after the
// write must be equal, rev compared as "this transaction's" or its value.
func TestCronJobsTriggersWhenKeepValues(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const id = "7a0c0d6e-55f1-4c1e-9a34-6f0e8b5d0c28"
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	writes := []triggerWrite{
		{name: "create pending", status: "pending", enabled: true, plpgsqlAfter028: true},
		{name: "create active, swept", status: "active", enabled: true, swept: true, plpgsqlAfter028: true},
		{name: "create active, swept_until NULL (a replica before 005)", status: "active", enabled: true, plpgsqlAfter028: true},
		{name: "create disabled", status: "active", swept: true, plpgsqlAfter028: true},
		{name: "provisioned", status: "pending", enabled: true,
			write: `UPDATE cron_jobs SET status = 'active', status_message = '', updated_at = $2::timestamptz + interval '1 minute', swept_until = $2::timestamptz WHERE id = $1`, plpgsqlAfter028: true},
		{name: "provisioned by a replica before 005 (swept_until stays NULL)", status: "pending", enabled: true,
			write: `UPDATE cron_jobs SET status = 'active', updated_at = $2::timestamptz + interval '1 minute' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "provisioning failed", status: "pending", enabled: true,
			write: `UPDATE cron_jobs SET status = 'failed', status_message = 'x', updated_at = $2::timestamptz + interval '1 minute' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "edit schedule", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET schedule = '*/5 * * * *', version = version + 1, updated_at = $2::timestamptz + interval '1 minute' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "edit timezone", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET timezone = 'Europe/Berlin', version = version + 1 WHERE id = $1`, plpgsqlAfter028: true},
		{name: "edit timeout", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET timeout_seconds = 600, version = version + 1 WHERE id = $1`, plpgsqlAfter028: true},
		{name: "edit command only", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET command = 'false', version = version + 1 WHERE id = $1`, plpgsqlAfter028: true},
		{name: "edit, version written unchanged", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET command = 'false', version = version WHERE id = $1`, plpgsqlAfter028: false},
		{name: "disable", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET enabled = false, version = version + 1 WHERE id = $1`, plpgsqlAfter028: true},
		{name: "enable", status: "active", swept: true,
			write: `UPDATE cron_jobs SET enabled = true, version = version + 1 WHERE id = $1`, plpgsqlAfter028: true},
		{name: "status failed", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET status = 'failed' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "auto-disable", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET consecutive_failures = 5, enabled = false, status = 'auto_disabled', version = version + 1,
				updated_at = $2::timestamptz + interval '1 minute' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "lift auto-disable", status: "auto_disabled", swept: true,
			write: `UPDATE cron_jobs SET consecutive_failures = 0, enabled = true, status = 'pending', not_before = $2::timestamptz + interval '2 minutes',
				swept_until = NULL, version = version + 1, updated_at = $2::timestamptz + interval '2 minutes' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "requeue", status: "failed", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET status = 'pending', version = version + 1, requeued_at = $2::timestamptz WHERE id = $1`, plpgsqlAfter028: true},
		{name: "not_before moves", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET not_before = $2::timestamptz + interval '1 hour' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "sweep write", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET swept_until = $2::timestamptz + interval '5 minutes', sweep_due_at = $2::timestamptz + interval '7 minutes' WHERE id = $1`},
		{name: "sweep write, schedule fires no more", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET swept_until = $2::timestamptz + interval '5 minutes', sweep_due_at = NULL WHERE id = $1`},
		{name: "sweep write of the sweep_due_at it had (the trigger bounds it)", status: "active", enabled: true, swept: true,
			setup: `UPDATE cron_jobs SET sweep_due_at = $2::timestamptz + interval '7 minutes' WHERE id = $1`,
			write: `UPDATE cron_jobs SET swept_until = $2::timestamptz + interval '5 minutes', sweep_due_at = $2::timestamptz + interval '7 minutes' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "outcome moves the cursor", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET last_run_at = $2::timestamptz + interval '1 minute', last_result = 'success', last_success_at = $2::timestamptz + interval '1 minute',
				swept_until = $2::timestamptz + interval '1 minute', sweep_due_at = $2::timestamptz + interval '3 minutes' WHERE id = $1`},
		{name: "outcome, last run only", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET last_run_at = $2::timestamptz + interval '1 minute', last_result = 'exit_code' WHERE id = $1`},
		{name: "outcome of an old replica: swept_until alone", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET swept_until = $2::timestamptz + interval '3 minutes' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "outcome starts the sweep (swept_until was NULL)", status: "failed", enabled: true,
			write: `UPDATE cron_jobs SET swept_until = $2::timestamptz WHERE id = $1`, plpgsqlAfter028: true},
		{name: "failure count", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET consecutive_failures = 2 WHERE id = $1`},
		{name: "updated_at, swept_until NULL", status: "active", enabled: true,
			write: `UPDATE cron_jobs SET updated_at = $2::timestamptz + interval '2 minutes' WHERE id = $1`, plpgsqlAfter028: true},
		{name: "updated_at, swept_until set", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET updated_at = $2::timestamptz + interval '2 minutes' WHERE id = $1`},
		{name: "rev written (an old rev is kept)", status: "active", enabled: true, swept: true,
			write: `UPDATE cron_jobs SET rev = '5'::xid8 WHERE id = $1`},
	}
	// run does w in a transaction (rolled back) and returns the row after
	// the insert and after the write, and how many times each trigger
	// function ran for the write.
	run := func(t *testing.T, w triggerWrite, before028 bool) (inserted, written string, calls int) {
		t.Helper()
		tx, err := f.st.Pool().Begin(ctx)
		must(t, err)
		defer tx.Rollback(ctx)
		if before028 {
			_, err = tx.Exec(ctx, cronJobsTriggersBefore028)
			must(t, err)
		}
		var swept *time.Time
		if w.swept {
			swept = &at
		}
		_, err = tx.Exec(ctx, `INSERT INTO cron_jobs (id, tenant_id, webroot_id, schedule, timezone, command, enabled, timeout_seconds,
				status, swept_until, not_before, created_at, updated_at)
			VALUES ($1, $2, $3, '* * * * *', 'UTC', 'true', $4, 60, $5, $6, $7, $7, $7)`,
			id, f.tenant, f.webroot, w.enabled, w.status, swept, at.Add(-time.Hour))
		must(t, err)
		row := func() string {
			t.Helper()
			var s string
			must(t, tx.QueryRow(ctx, `SELECT (to_jsonb(j) || jsonb_build_object('rev',
					CASE WHEN j.rev = pg_current_xact_id() THEN 'this transaction' ELSE j.rev::text END))::text
				FROM cron_jobs j WHERE id = $1`, id).Scan(&s))
			return s
		}
		if w.write == "" {
			return row(), "", 0
		}
		// An older rev, so that a write giving it this transaction shows.
		_, err = tx.Exec(ctx, `UPDATE cron_jobs SET rev = '3'::xid8 WHERE id = $1`, id)
		must(t, err)
		if w.setup != "" {
			_, err = tx.Exec(ctx, w.setup, id, at)
			must(t, err)
		}
		inserted = row()
		_, err = tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`)
		must(t, err)
		callsNow := func() int {
			t.Helper()
			var n int
			must(t, tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
				WHERE funcname IN ('cron_jobs_set_rev', 'cron_jobs_set_sweep_due')`).Scan(&n))
			return n
		}
		c0 := callsNow()
		args := []any{id}
		if strings.Contains(w.write, "$2") {
			args = append(args, at)
		}
		_, err = tx.Exec(ctx, w.write, args...)
		must(t, err)
		return inserted, row(), callsNow() - c0
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			ins, wrote, calls := run(t, w, false)
			insBefore, wroteBefore, callsBefore := run(t, w, true)
			if ins != insBefore {
				t.Errorf("before the write:\n 028:    %s\n before: %s", ins, insBefore)
			}
			if wrote != wroteBefore {
				t.Errorf("after the write:\n 028:    %s\n before: %s", wrote, wroteBefore)
			}
			if w.write == "" {
				return
			}
			if callsBefore == 0 {
				t.Errorf("before 028 the write called no trigger function: the count is not seen")
			}
			if (calls > 0) != w.plpgsqlAfter028 {
				t.Errorf("after 028 the write called the trigger functions %d times, want calls: %v", calls, w.plpgsqlAfter028)
			}
		})
	}
}

// Migration 028 applies over the triggers before it with jobs in the
// table: it leaves every row as it is and the table with exactly its four
// triggers (run in a transaction that is rolled back, over the triggers
// of 004 and 011 restored in it).
func TestMigration028SwapsTriggers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.job(5)
	f.job(3)
	rows := func(tx pgx.Tx) string {
		t.Helper()
		var s string
		must(t, tx.QueryRow(ctx, `SELECT string_agg(to_jsonb(j)::text, ',' ORDER BY id) FROM cron_jobs j`).Scan(&s))
		return s
	}
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, cronJobsTriggersBefore028)
	must(t, err)
	before := rows(tx)
	sql, err := os.ReadFile("migrations/028_cron_jobs_trigger_when.sql")
	must(t, err)
	_, err = tx.Exec(ctx, string(sql))
	must(t, err)
	if after := rows(tx); after != before {
		t.Errorf("028 changed the jobs:\n before: %s\n after:  %s", before, after)
	}
	var names string
	must(t, tx.QueryRow(ctx, `SELECT string_agg(tgname, ' ' ORDER BY tgname) FROM pg_trigger
		WHERE tgrelid = 'cron_jobs'::regclass AND NOT tgisinternal`).Scan(&names))
	if want := "cron_jobs_rev_insert cron_jobs_rev_update cron_jobs_sweep_due_insert cron_jobs_sweep_due_update"; names != want {
		t.Errorf("triggers of cron_jobs after 028: %q, want %q", names, want)
	}
}
