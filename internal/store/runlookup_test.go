package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// A lookup of a run by a key that names its slot reads one month of the
// history (migration 027 partitions it by month of the slot), also in the
// generic plan a cached prepared statement gets; a manual key, which
// names no slot, reads every month (the control: the count can differ).
func TestRunLookupsReadOneMonth(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	f.outcome(j, slot, wire.ResultSuccess)
	months := f.count(`SELECT count(*) FROM pg_inherits WHERE inhparent = 'cron_job_runs'::regclass`)
	if months < 3 {
		t.Fatalf("the history has %d partitions; the test needs several", months)
	}
	conn, err := f.st.Pool().Acquire(ctx)
	must(t, err)
	defer func() {
		_, _ = conn.Exec(context.Background(), "RESET ALL")
		conn.Release()
	}()
	recorded, args := store.RunKeyWhere("r.", runkey.Scheduled(j.ID, slot), 1)
	for _, tc := range []struct {
		name string
		sql  string
		args []any
		want int // partitions read; 0: every one
	}{
		{"outcome's read, scheduled key", "", nil, 1},
		{"outcome's read, retry key", "", nil, 1},
		{"outcome's read, manual key", "", nil, 0},
		{"a start's check (RecordStart)", `SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE ` + recorded + ` AND r.result <> 'lost')`, args, 1},
		{"replace a placeholder (runWrite)", "", nil, 1},
		{"a lost run's check (sweep)", `SELECT (` + store.SlotRecorded + `) IS NULL
			FROM (SELECT $1::uuid AS cron_job_id, $2::timestamptz AS scheduled_at) u`, []any{j.ID, slot}, 1},
		{"a run still running (runningWhere)", `SELECT s.run_key FROM cron_job_run_starts s JOIN cron_jobs j ON j.id = s.cron_job_id
			WHERE s.cron_job_id = $1 AND ` + store.RunningWhere, []any{j.ID}, 0},
		{"the run by id and slot (retry, events)", `SELECT superseded FROM cron_job_runs WHERE id = $1 AND scheduled_at = $2`, []any{int64(1), slot}, 1},
		{"the run by id alone (control)", `SELECT superseded FROM cron_job_runs WHERE id = $1`, []any{int64(1)}, 0},
	} {
		sql, args := tc.sql, tc.args
		switch tc.name {
		case "outcome's read, scheduled key":
			sql, args = store.StoredRunQuery(j.ID, runkey.Scheduled(j.ID, slot))
		case "outcome's read, retry key":
			sql, args = store.StoredRunQuery(j.ID, runkey.Retry(j.ID, slot, 2))
		case "outcome's read, manual key":
			sql, args = store.StoredRunQuery(j.ID, runkey.Manual(j.ID, "17"))
		case "replace a placeholder (runWrite)":
			var named pgx.NamedArgs
			sql, named = store.ReplaceRunSQL(f.node, j.ID, store.Outcome{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version,
				ScheduledAt: slot, Result: wire.ResultSuccess}, slot)
			args = []any{named}
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			must(t, err)
			tx, err := conn.Begin(ctx)
			must(t, err)
			var plan []byte
			err = tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan)
			_ = tx.Rollback(ctx)
			must(t, err)
			got := partitionsRead(t, plan)
			want := tc.want
			if want == 0 {
				want = months
			}
			if got != want {
				t.Errorf("%s (%s): reads %d of %d partitions, want %d:\n%s", tc.name, mode, got, months, want, plan)
			}
		}
		// Each month's read can be a probe of the identity index (or the
		// primary key, by id): with sequential scans priced out, nothing
		// else is left (a lookup no index serves would still scan, at any
		// price, and one that only the job's prefix serves reads all the
		// job's runs of the month).
		// (Not the join of runningWhere: on months this empty, any index
		// of the job ties; TestRunningReadsTheStartsRunOnly counts what
		// it reads.)
		if tc.name == "the run by id alone (control)" || tc.name == "a run still running (runningWhere)" {
			continue
		}
		tx, err := conn.Begin(ctx)
		must(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL enable_seqscan = off")
		must(t, err)
		var plan []byte
		err = tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan)
		_ = tx.Rollback(ctx)
		must(t, err)
		if other := scansNotByKey(t, plan); len(other) > 0 {
			t.Errorf("%s: reads %v other than by the run's identity or id, even with sequential scans off:\n%s", tc.name, other, plan)
		}
	}
}

// partitionsRead counts the cron_job_runs partitions an EXPLAIN (FORMAT
// JSON) plan scans (those pruned at plan or executor start are absent).
func partitionsRead(t *testing.T, plan []byte) int {
	t.Helper()
	seen := map[string]bool{}
	walkRunScans(t, plan, func(rel string, _ map[string]any) { seen[rel] = true })
	return len(seen)
}

// scansNotByKey names the cron_job_runs partitions an EXPLAIN (FORMAT
// JSON) plan reads other than by an index condition on the run's identity
// (its key_request among them) or its id.
func scansNotByKey(t *testing.T, plan []byte) []string {
	t.Helper()
	var other []string
	walkRunScans(t, plan, func(rel string, n map[string]any) {
		cond, _ := n["Index Cond"].(string)
		if !strings.Contains(cond, "(key_request = ") && !strings.Contains(cond, "(id = ") {
			other = append(other, rel+" ("+n["Node Type"].(string)+": "+cond+")")
		}
	})
	return other
}

// walkRunScans calls visit with each plan node that reads a cron_job_runs
// partition: the partition and the node.
func walkRunScans(t *testing.T, plan []byte, visit func(rel string, node map[string]any)) {
	t.Helper()
	var doc []map[string]any
	must(t, json.Unmarshal(plan, &doc))
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if rel, ok := n["Relation Name"].(string); ok && strings.HasPrefix(rel, "cron_job_runs_") {
			visit(rel, n)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	walk(doc[0]["Plan"].(map[string]any))
}

// The recount reads the runs from the newest counted success on; its
// count is the one of the whole window (the old statement, kept here),
// at the window's edge too (a window of 3 runs).
func TestRecountFromTheLastSuccessCountsAsTheWindow(t *testing.T) {
	const windowSQL = `
		SELECT result FROM (
			SELECT result, scheduled_at, id FROM cron_job_runs
			WHERE cron_job_id = $1 AND result = ANY($2) AND trigger <> ALL($4) AND NOT superseded
			  AND id > (SELECT failures_after_run FROM cron_jobs WHERE id = $1)
			ORDER BY scheduled_at DESC, id DESC LIMIT $3) recent
		ORDER BY scheduled_at, id`
	f := newFixture(t)
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	counted := []string{"success", "exit_code", "signal", "timeout", "oom", "failed"}
	byLetter := map[byte]wire.Result{'S': wire.ResultSuccess, 'F': wire.ResultExitCode, 'T': wire.ResultTimeout,
		'L': wire.ResultLost, 'P': wire.ResultPlatformError, 'O': wire.ResultOverlapSkipped}
	for _, seq := range []string{"", "S", "F", "SF", "FS", "FFS", "SFFF", "SFFFF", "FSFF", "FFFFS", "SFLFP", "SSSF",
		"STFOF", "SFSFS", "FFFFFFF", "LLL", "SLLF"} {
		j := f.job(0) // never auto-disabled: the history stays as written
		for i := range len(seq) {
			f.outcome(j, base.Add(time.Duration(i)*time.Minute), byLetter[seq[i]])
		}
		// (The other sequences are other jobs of the same history.)
		for _, window := range []int{3, 1000} {
			read := func(sql string) (int, []wire.Result) {
				rows, err := f.st.Pool().Query(ctx, sql, j.ID, counted, window, []string{"backfill"})
				must(t, err)
				rs, err := pgx.CollectRows(rows, pgx.RowTo[wire.Result])
				must(t, err)
				n, _ := store.CountFailures(rs, 0)
				return n, rs
			}
			got, gotRows := read(store.RecountSQL)
			want, wantRows := read(windowSQL)
			if got != want {
				t.Errorf("%q, window %d: recount %d (%v), the window's %d (%v)", seq, window, got, gotRows, want, wantRows)
			}
			if window == 1000 && len(gotRows) > 0 && strings.Contains(seq, "S") && gotRows[0] != wire.ResultSuccess {
				t.Errorf("%q: recount read from %v, want from the last success", seq, gotRows)
			}
		}
	}
}

// The store holds an outcome to its key's slot as the API does: a record
// at another slot would be missed by every lookup of its key (which names
// the slot), and a resend recorded twice.
func TestOutcomeOffItsKeysSlotIsRefused(t *testing.T) {
	f := newFixture(t)
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	_, err := f.st.RecordOutcome(context.Background(), f.node, j.ID, store.Outcome{
		RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version, ScheduledAt: slot.Add(time.Second), Result: wire.ResultSuccess})
	if err == nil {
		t.Fatal("an outcome off its key's slot was recorded")
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 0 {
		t.Fatalf("%d runs recorded, want none", n)
	}
}

// A manual key names no slot: its record is found by key alone, and a
// real result that replaces its placeholder updates the record where it
// is (the slot the read found), whatever time the second report carries;
// a resend of that result is then a duplicate. One row throughout.
func TestManualReplacementKeepsOneRecord(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	key := runkey.Manual(j.ID, "17")
	first := time.Now().UTC().Truncate(time.Second).AddDate(0, -1, 0)
	later := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	record := func(at time.Time, r wire.Result) store.OutcomeResult {
		t.Helper()
		res, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: at,
			Result: r, Trigger: wire.TriggerManual})
		must(t, err)
		return res
	}
	record(first, wire.ResultPlatformError)
	if res := record(later, wire.ResultSuccess); !res.Replaced || res.Duplicate {
		t.Fatalf("the real result: %+v, want it to replace the platform error", res)
	}
	if res := record(later, wire.ResultSuccess); !res.Duplicate {
		t.Fatalf("the resend: %+v, want a duplicate", res)
	}
	var n int
	var result string
	var at time.Time
	must(t, f.st.Pool().QueryRow(ctx, `SELECT count(*) OVER (), result, scheduled_at FROM cron_job_runs WHERE run_key = $1`, key).
		Scan(&n, &result, &at))
	if n != 1 || result != string(wire.ResultSuccess) || !at.Equal(first) {
		t.Fatalf("records: %d, %s at %s; want one success at %s", n, result, at, first)
	}
}
