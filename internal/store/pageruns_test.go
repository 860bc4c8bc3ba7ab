package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// Every condition of a runs page is one an index serves, also in the
// generic plan PostgreSQL caches for a prepared statement: a cursor
// deep in a job's history seeks to it instead of scanning from the
// newest run, and a result or trigger filter uses its own index.
func TestPageRunsUsesItsIndexes(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	base := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 30; i++ {
		f.outcome(j, base.Add(time.Duration(i)*time.Minute), wire.ResultSuccess)
	}
	from, to := base, base.Add(time.Hour)
	before := &store.RunPos{ScheduledAt: base.Add(10 * time.Minute), ID: 5}
	conn, err := f.st.Pool().Acquire(ctx)
	must(t, err)
	defer func() {
		_, _ = conn.Exec(context.Background(), "RESET ALL")
		conn.Release()
	}()
	// The plan a cached statement gets after five runs, and a table too
	// small for the planner to prefer an index on its own.
	for _, set := range []string{"SET plan_cache_mode = force_generic_plan", "SET enable_seqscan = off"} {
		_, err := conn.Exec(ctx, set)
		must(t, err)
	}
	for _, tc := range []struct {
		name  string
		q     store.RunQuery
		index string
		conds []string // what the index condition must hold
	}{
		{"first page", store.RunQuery{Limit: 100}, "cron_job_runs_page", []string{"cron_job_id"}},
		{"a later page", store.RunQuery{Limit: 100, Before: before}, "cron_job_runs_page", []string{"cron_job_id", "scheduled_at", "id"}},
		{"a time range", store.RunQuery{Limit: 100, From: &from, To: &to, Before: before}, "cron_job_runs_page", []string{"scheduled_at"}},
		{"one result", store.RunQuery{Limit: 100, Results: []wire.Result{wire.ResultExitCode}, Before: before},
			"cron_job_runs_result_page", []string{"result", "scheduled_at"}},
		{"several results: a filter on the page index", store.RunQuery{Limit: 100,
			Results: []wire.Result{wire.ResultExitCode, wire.ResultTimeout}, Before: before},
			"cron_job_runs_page", []string{"scheduled_at"}},
		{"run-now only", store.RunQuery{Limit: 100, Triggers: []wire.Trigger{wire.TriggerManual}, Before: before},
			"cron_job_runs_trigger_page", []string{"trigger", "scheduled_at"}},
	} {
		sql, args := store.PageRunsSQL(j.ID, tc.q)
		if strings.Contains(sql, "IS NULL") {
			t.Errorf("%s: a condition no index serves in a generic plan: %s", tc.name, sql)
		}
		// A named statement, as pgx's statement cache makes, explained
		// with its generic plan.
		_, err := conn.Conn().Prepare(ctx, "page_runs", sql)
		must(t, err)
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE page_runs"+literals(t, args))
		must(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		must(t, err)
		must(t, conn.Conn().Deallocate(ctx, "page_runs"))
		plan := strings.Join(lines, "\n")
		// The history is partitioned by month (migration 027): each
		// month's scan must use its own part of the index.
		if used := indexesUsed(lines); len(used) == 0 || !allIn(used, f.indexParts(tc.index)) {
			t.Errorf("%s: plan does not use %s in every month:\n%s", tc.name, tc.index, plan)
		}
		cond := ""
		for _, l := range lines {
			if strings.Contains(l, "Index Cond") {
				cond = l
			}
		}
		for _, c := range tc.conds {
			if !strings.Contains(cond, c) {
				t.Errorf("%s: index condition lacks %s:\n%s", tc.name, c, plan)
			}
		}
		// And the statement answers.
		if _, _, err := f.st.PageRuns(ctx, j.ID, tc.q); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// indexParts are the partitions' indexes of the partitioned index parent.
func (f *fixture) indexParts(parent string) map[string]bool {
	f.t.Helper()
	rows, err := f.st.Pool().Query(context.Background(), `SELECT c.relname::text FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass($1)`, parent)
	must(f.t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(f.t, err)
	parts := map[string]bool{}
	for _, n := range names {
		parts[n] = true
	}
	return parts
}

// indexesUsed are the indexes a plan's scans use.
func indexesUsed(plan []string) []string {
	var used []string
	for _, l := range plan {
		if _, rest, ok := strings.Cut(l, " using "); ok && strings.Contains(l, "Index") {
			used = append(used, strings.Fields(rest)[0])
		}
	}
	return used
}

func allIn(names []string, set map[string]bool) bool {
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
}

// literals spells the test's own values for EXPLAIN EXECUTE, which takes
// no bound parameters.
func literals(t *testing.T, args []any) string {
	var out []string
	for _, a := range args {
		switch v := a.(type) {
		case string:
			out = append(out, "'"+v+"'")
		case int, int64:
			out = append(out, fmt.Sprint(v))
		case time.Time:
			out = append(out, "'"+v.Format(time.RFC3339Nano)+"'")
		case []wire.Result:
			out = append(out, "'{"+fmt.Sprint(strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]"))+"}'")
		case []wire.Trigger:
			out = append(out, "'{"+strings.Trim(strings.Join(strings.Fields(fmt.Sprint(v)), ","), "[]")+"}'")
		default:
			t.Fatalf("no literal for %T", a)
		}
	}
	return "(" + strings.Join(out, ", ") + ")"
}
