package store_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// The database computes a run's identity from its key (migration 029's
// run_key_* functions) as runkey.Parse reads the key: the job, the
// trigger, the request and the attempt of every kind of key.
func TestRunIdentityFunctionsReadKeysAsRunkeyDoes(t *testing.T) {
	f := newFixture(t)
	const job = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	slot := time.Date(2026, 11, 21, 9, 5, 0, 0, time.UTC)
	for _, key := range []string{
		runkey.Scheduled(job, slot), runkey.Manual(job, "4711"), runkey.Manual(job, "req-1"),
		runkey.Backfill(job, slot, "r1"), runkey.Retry(job, slot, 2), runkey.Retry(job, slot, runkey.MaxAttempt),
	} {
		k, err := runkey.Parse(key)
		must(t, err)
		var gotTrigger, gotRequest string
		var gotAttempt int
		must(t, f.st.Pool().QueryRow(context.Background(),
			`SELECT run_key_trigger($1), run_key_request($1), run_key_attempt($1)`, key).
			Scan(&gotTrigger, &gotRequest, &gotAttempt))
		if gotTrigger != string(k.Trigger) || gotRequest != k.Request || gotAttempt != k.AttemptNumber() {
			t.Errorf("%s: database reads trigger %s, request %q, attempt %d; runkey: %s, %q, %d",
				key, gotTrigger, gotRequest, gotAttempt, k.Trigger, k.Request, k.AttemptNumber())
		}
	}
}

// A row's identity columns are its key's, whatever a writer supplies: a
// row whose job is not its key's is refused, a supplied attempt is
// replaced by the key's, and a second row of one identity is refused
// (the catch-up trigger included: it is its scheduled key's run).
func TestRunIdentityIsTheKeys(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, other := f.job(0), f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	insert := func(key, jobID string, attempt int, trigger string) error {
		_, err := f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, attempt, trigger)
			VALUES ($1, $2, 1, $3, 'success', $4, NULLIF($5, ''))`, key, jobID, slot, attempt, trigger)
		return err
	}
	violates := func(err error, constraint string) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.ConstraintName == constraint
	}
	if err := insert(runkey.Scheduled(j.ID, slot), other.ID, 1, ""); !violates(err, "cron_job_runs_identity_of_key") {
		t.Errorf("a run recorded under another job than its key's: %v, want the identity check to refuse it", err)
	}
	must(t, insert(runkey.Scheduled(j.ID, slot), j.ID, 3, ""))
	if n := f.count(`SELECT attempt FROM cron_job_runs WHERE cron_job_id = $1`, j.ID); n != 1 {
		t.Errorf("a scheduled run's attempt is %d, want the key's (1)", n)
	}
	var pgErr *pgconn.PgError
	if err := insert(runkey.Scheduled(j.ID, slot), j.ID, 1, string(wire.TriggerCatchUp)); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Errorf("a second run of one key (as a catch-up): %v, want the identity key to refuse it", err)
	}
	must(t, insert(runkey.Retry(j.ID, slot, 2), j.ID, 1, ""))
	must(t, insert(runkey.Backfill(j.ID, slot, "r1"), j.ID, 1, ""))
	must(t, insert(runkey.Manual(j.ID, "r1"), j.ID, 1, ""))
	rows, err := f.st.Pool().Query(ctx, `SELECT key_trigger || '/' || key_request || '/' || attempt FROM cron_job_runs
		WHERE cron_job_id = $1 ORDER BY 1`, j.ID)
	must(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	if want := []string{"backfill/r1/1", "manual/r1/1", "retry//2", "scheduled//1"}; !slices.Equal(got, want) {
		t.Errorf("identities %v, want %v", got, want)
	}
}

// Migration 029 on a history of every kind of run, in two months and the
// default partition, with keys of the first version ({job}#{slot}#{version},
// two versions of one slot): the runs and their ids stay, each gets the
// identity its key names (as runkey reads it; a first-version key's
// request is all of it after the job), distinct keys stay distinct, and
// the identity key holds after.
func TestMigration029KeepsRunsAndComputesIdentity(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	lastMonth, longAgo := slot.AddDate(0, -1, 0), slot.AddDate(-3, 0, 0) // longAgo: the default partition
	v1 := func(at time.Time, version int) string {
		return j.ID + "#" + at.Format(time.RFC3339) + "#" + strconv.Itoa(version)
	}
	type run struct {
		key  string
		at   time.Time
		want string // trigger/request/attempt
	}
	runs := []run{
		{runkey.Scheduled(j.ID, slot), slot, "scheduled//1"},
		{runkey.Retry(j.ID, slot, 2), slot, "retry//2"},
		{runkey.Backfill(j.ID, lastMonth, "r1"), lastMonth, "backfill/r1/1"},
		{runkey.Manual(j.ID, "17"), lastMonth, "manual/17/1"},
		{runkey.Scheduled(j.ID, longAgo), longAgo, "scheduled//1"},
		{v1(longAgo, 1), longAgo, longAgo.Format(time.RFC3339) + "/" + longAgo.Format(time.RFC3339) + "#1/1"},
		{v1(longAgo, 2), longAgo, longAgo.Format(time.RFC3339) + "/" + longAgo.Format(time.RFC3339) + "#2/1"},
	}
	unmigrate029(t, f)
	ids := map[string]int64{}
	for _, r := range runs {
		var id int64
		must(t, f.st.Pool().QueryRow(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
			VALUES ($1, $2, 1, $3, 'success') RETURNING id`, r.key, j.ID, r.at).Scan(&id))
		ids[r.key] = id
	}
	if got := f.partitionOf(runs[len(runs)-1].key); got != "cron_job_runs_default" {
		t.Fatalf("the first version's run is in %s, want the default partition", got)
	}
	sql, err := os.ReadFile("migrations/029_run_identity_columns.sql")
	must(t, err)
	_, err = f.st.Pool().Exec(ctx, string(sql))
	must(t, err)
	for _, r := range runs {
		var id int64
		var got string
		must(t, f.st.Pool().QueryRow(ctx, `SELECT id, key_trigger || '/' || key_request || '/' || attempt FROM cron_job_runs
			WHERE run_key = $1`, r.key).Scan(&id, &got))
		if id != ids[r.key] || got != r.want {
			t.Errorf("%s after 029: id %d, identity %s; want id %d, identity %s", r.key, id, got, ids[r.key], r.want)
		}
	}
	_, err = f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
		VALUES ($1, $2, 1, $3, 'success')`, runkey.Retry(j.ID, slot, 2), j.ID, slot)
	if err == nil {
		t.Error("a second run of a retry key was recorded after 029")
	}
}

// The identity holds no slot (a scheduled key's slot is its record's
// scheduled_at): a lookup that compares a start's or a retry's key with
// the runs must name the slot too. A run of another slot (of the same
// job, trigger and attempt) neither ends a start nor stands for a retry
// that never reported.
func TestRunsOfOtherSlotsAreOtherRuns(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	earlier := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Minute)
	slot := earlier.Add(time.Minute)
	f.outcome(j, earlier, wire.ResultSuccess)
	noted, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: runkey.Scheduled(j.ID, slot), Version: j.Version,
		ScheduledAt: slot, StartedAt: slot.Add(time.Second)})
	must(t, err)
	running, err := f.st.RunningRuns(ctx, j.ID)
	must(t, err)
	since, err := f.st.RunningSince(ctx, []string{j.ID})
	must(t, err)
	if !noted || len(running) != 1 || running[0].RunKey != runkey.Scheduled(j.ID, slot) || since[j.ID].IsZero() {
		t.Errorf("a start after another slot's run: noted %v, running %+v, since %v; want the start running", noted, running, since)
	}

	r := f.retryJob(2, 0)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := today.Add(-24 * time.Hour)
	f.attempt(r, runkey.Scheduled(r.ID, today), today, wire.ResultExitCode) // queues attempt 2 of today
	f.attempt(r, runkey.Retry(r.ID, yesterday, 2), yesterday, wire.ResultSuccess)
	n, err := f.st.ResolveDroppedRetries(ctx, time.Now().Add(time.Minute+store.RetryGrace+2*time.Minute), store.RetryGrace)
	if err != nil || n != 1 {
		t.Errorf("resolved %d (%v), want today's dropped retry (yesterday's attempt 2 is not today's)", n, err)
	}
}

// Whether a start is still running reads the start's own run, not the
// job's history: for jobs with 2,000 scheduled runs each, one with a
// scheduled start and one with a manual start, RunningRuns and
// RunningSince (the jobs list: any of several jobs) read at most a few
// rows of the history per start, as EXPLAIN ANALYZE counts them (rows
// returned and rows an index or filter read and dropped). A condition
// that does not bound the probe by the slot, or by the manual identity,
// reads all 2,000.
func TestRunningReadsTheStartsRunOnly(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, m := f.job(0), f.job(0)
	first := time.Now().UTC().Truncate(time.Minute).Add(-3000 * time.Minute)
	for _, job := range []string{j.ID, m.ID} {
		var keys []string
		var slots []time.Time
		for i := range 2000 {
			slot := first.Add(time.Duration(i) * time.Minute)
			keys, slots = append(keys, runkey.Scheduled(job, slot)), append(slots, slot)
		}
		_, err := f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
			SELECT k, $2, 1, s, 'success' FROM unnest($1::text[], $3::timestamptz[]) AS u(k, s)`, keys, job, slots)
		must(t, err)
	}
	slot := time.Now().UTC().Truncate(time.Minute)
	for _, st := range []struct {
		job, key string
		trigger  wire.Trigger
	}{{j.ID, runkey.Scheduled(j.ID, slot), wire.TriggerScheduled}, {m.ID, runkey.Manual(m.ID, "17"), wire.TriggerManual}} {
		_, err := f.st.RecordStart(ctx, f.node, st.job, wire.RunStart{RunKey: st.key, Version: j.Version,
			ScheduledAt: slot, StartedAt: slot.Add(time.Second), Trigger: st.trigger})
		must(t, err)
	}
	_, err := f.st.Pool().Exec(ctx, `ANALYZE cron_job_runs`)
	must(t, err)
	for name, args := range map[string][]any{"RunningRuns": {j.ID}, "RunningRuns, manual": {m.ID},
		"RunningSince": {[]string{j.ID, m.ID, f.job(0).ID}}} {
		// Sequential scans priced out (at this size the planner would
		// read the months whole), and then bitmap scans too (it may
		// prefer a bitmap OR of two indexes at this size; over a history
		// of millions it probes an index): what is left are index probes,
		// whose reads the conditions bound or do not.
		for _, off := range []string{"enable_seqscan", "enable_seqscan, enable_bitmapscan"} {
			tx, err := f.st.Pool().Begin(ctx)
			must(t, err)
			for _, setting := range strings.Split(off, ", ") {
				_, err = tx.Exec(ctx, "SET LOCAL "+setting+" = off")
				must(t, err)
			}
			var plan []byte
			err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+store.RunningSQL[strings.TrimSuffix(name, ", manual")], args...).Scan(&plan)
			_ = tx.Rollback(ctx)
			must(t, err)
			if read := rowsRead(t, plan); read > 10 {
				t.Errorf("%s (%s off) reads %.0f rows of the history for its starts, want their own runs' at most:\n%s", name, off, read, plan)
			}
			// The manual start's look in every month names the manual
			// identity with constants, which the planner can estimate
			// (with expressions of the start it may read the job's index
			// instead, over a long history).
			if name == "RunningRuns, manual" && !strings.Contains(string(plan), `(key_trigger = 'manual'::text)`) {
				t.Errorf("%s: no probe names key_trigger = 'manual':\n%s", name, plan)
			}
		}
	}
	for _, job := range []string{j.ID, m.ID} {
		if running, err := f.st.RunningRuns(ctx, job); err != nil || len(running) != 1 {
			t.Errorf("running %+v (%v), want the start", running, err)
		}
	}
}

// A manual start ends with its run's real record wherever that record
// is (a manual key names no slot: another month than the start's), and
// not with a placeholder record of the key.
func TestManualStartEndsWithItsRecordInAnyMonth(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute)
	key := runkey.Manual(j.ID, "17")
	_, err := f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot,
		StartedAt: slot.Add(time.Second), Trigger: wire.TriggerManual})
	must(t, err)
	running := func() int {
		t.Helper()
		rs, err := f.st.RunningRuns(ctx, j.ID)
		must(t, err)
		since, err := f.st.RunningSince(ctx, []string{j.ID})
		must(t, err)
		if (len(rs) == 0) != since[j.ID].IsZero() {
			t.Fatalf("RunningRuns %+v and RunningSince %v disagree", rs, since)
		}
		return len(rs)
	}
	// Written directly: an outcome would also end the start (endStart).
	record := func(result wire.Result) {
		t.Helper()
		_, err := f.st.Pool().Exec(ctx, `DELETE FROM cron_job_runs WHERE cron_job_id = $1`, j.ID)
		must(t, err)
		_, err = f.st.Pool().Exec(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
			VALUES ($1, $2, 1, $3, $4)`, key, j.ID, slot.AddDate(0, -1, 0), result)
		must(t, err)
	}
	record(wire.ResultLost)
	if n := running(); n != 1 {
		t.Errorf("with a placeholder record a month off: %d running, want the start", n)
	}
	record(wire.ResultSuccess)
	if n := running(); n != 0 {
		t.Errorf("with the real record a month off: %d running, want none", n)
	}
}

// The identity columns and the run_key_* functions (which joins use)
// read every key the API accepts alike, and as runkey.Parse does: the
// columns and the check spell the functions' rules out (migration 029).
func TestRunIdentityColumnsAreTheFunctions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	keys := []string{runkey.Scheduled(j.ID, slot)}
	for _, req := range []string{"0", "Z", "_", "-", "a-_Z9", strings.Repeat("z", 64)} {
		keys = append(keys, runkey.Manual(j.ID, req), runkey.Backfill(j.ID, slot, req))
	}
	for a := 2; a <= runkey.MaxAttempt; a++ {
		keys = append(keys, runkey.Retry(j.ID, slot, a))
	}
	for _, key := range keys {
		k, err := runkey.Parse(key)
		must(t, err)
		var trigger, request string
		var attempt int
		var same bool
		must(t, f.st.Pool().QueryRow(ctx, `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
			VALUES ($1, $2, 1, $3, 'success')
			RETURNING key_trigger, key_request, attempt, key_trigger = run_key_trigger(run_key)
			          AND key_request = run_key_request(run_key) AND attempt = run_key_attempt(run_key)`, key, j.ID, slot).
			Scan(&trigger, &request, &attempt, &same))
		if !same || trigger != string(k.Trigger) || request != k.Request || attempt != k.AttemptNumber() {
			t.Errorf("%s: columns %s/%q/%d (the functions agree: %v), runkey %s/%q/%d",
				key, trigger, request, attempt, same, k.Trigger, k.Request, k.AttemptNumber())
		}
	}
}

// rowsRead is how many rows of cron_job_runs an EXPLAIN (ANALYZE, FORMAT
// JSON) plan read: returned, or read and dropped by a filter or a recheck,
// over all loops.
func rowsRead(t *testing.T, plan []byte) float64 {
	t.Helper()
	read := 0.0
	walkRunScans(t, plan, func(_ string, n map[string]any) {
		loops, _ := n["Actual Loops"].(float64)
		for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			v, _ := n[k].(float64)
			read += v * max(loops, 1)
		}
	})
	return read
}

// unmigrate029 takes the history back to its shape before migration 029:
// no identity columns, functions or check, the unique key (run_key,
// scheduled_at), and 025's row trigger.
func unmigrate029(t *testing.T, f *fixture) {
	t.Helper()
	_, err := f.st.Pool().Exec(context.Background(), `
		ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_identity, DROP CONSTRAINT cron_job_runs_identity_of_key,
			DROP COLUMN key_trigger, DROP COLUMN key_request;
		CREATE OR REPLACE FUNCTION cron_job_runs_trigger_from_key() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.trigger IS NULL THEN
				NEW.trigger := split_part(NEW.run_key, '#', 2);
			END IF;
			IF split_part(NEW.run_key, '#', 2) = 'retry' THEN
				NEW.attempt := split_part(NEW.run_key, '#', 4)::integer;
			END IF;
			RETURN NEW;
		END $$;
		DROP FUNCTION run_key_trigger(text), run_key_request(text), run_key_attempt(text);
		ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_run_key_key UNIQUE (run_key, scheduled_at);`)
	must(t, err)
}
