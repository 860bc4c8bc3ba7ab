package store_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// partitionOf is the partition that holds the run under key.
func (f *fixture) partitionOf(key string) string {
	f.t.Helper()
	var name string
	must(f.t, f.st.Pool().QueryRow(context.Background(),
		`SELECT tableoid::regclass::text FROM cron_job_runs WHERE run_key = $1`, key).Scan(&name))
	return name
}

// insertRun writes a run directly, as an old writer or a test would.
func (f *fixture) insertRun(j store.CronJob, slot time.Time) string {
	f.t.Helper()
	key := runkey.Scheduled(j.ID, slot)
	_, err := f.st.Pool().Exec(context.Background(), `INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result)
		VALUES ($1, $2, 1, $3, 'success')`, key, j.ID, slot)
	must(f.t, err)
	return key
}

// The history is partitioned by month: the migration leaves months ahead;
// a run no month holds lands in the default partition rather than failing;
// a rotation creates the month such a run waits for and moves it in, and
// drops a month past the retention whole while newer runs stay.
func TestRunPartitionRotation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i <= store.RunPartitionsAhead; i++ {
		name := "cron_job_runs_" + month.AddDate(0, i, 0).Format("2006_01")
		if n := f.count(`SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass($1)`, name); n != 1 {
			t.Fatalf("no partition %s after the migration", name)
		}
	}

	past := f.insertRun(j, time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC))
	future := f.insertRun(j, month.AddDate(0, 8, 3))
	recent := f.insertRun(j, now.Truncate(time.Minute).Add(-time.Hour))
	if got := f.partitionOf(past); got != "cron_job_runs_default" {
		t.Errorf("a run of 1999 is in %s, want the default partition", got)
	}
	if got := f.partitionOf(future); got != "cron_job_runs_default" {
		t.Errorf("a run 8 months ahead is in %s, want the default partition", got)
	}

	// A run of next month's slot that arrived just now: a month whose
	// runs arrived within the retention (by the database's clock) is not
	// dropped, whatever its slots, or a resend of that report would
	// record the run again. This month's run arrived long ago.
	late := f.insertRun(j, month.AddDate(0, 1, 2))
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_job_runs SET received_at = now() - interval '60 days' WHERE run_key = $1`, recent)
	must(t, err)

	// Eight months later: the month the future run waits for is created
	// and the run moves into it; the runs of this month are past a
	// 30-day retention, their month goes whole.
	later := month.AddDate(0, 8, 0)
	created, dropped, err := f.st.RotateRunPartitions(ctx, later, later.Add(-30*24*time.Hour))
	must(t, err)
	if want := "cron_job_runs_" + month.AddDate(0, 1, 0).Format("2006_01"); f.partitionOf(late) != want {
		t.Errorf("the run that arrived just now is in %q, want its month %s kept", f.partitionOf(late), want)
	}
	if created != store.RunPartitionsAhead+1 {
		t.Errorf("created %d months, want %d", created, store.RunPartitionsAhead+1)
	}
	if want := "cron_job_runs_" + later.Format("2006_01"); f.partitionOf(future) != want {
		t.Errorf("the waiting run is in %s, want %s", f.partitionOf(future), want)
	}
	if dropped < 1 || f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = $1`, recent) != 0 {
		t.Errorf("dropped %d months; this month's run is still there", dropped)
	}
	if f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = ANY($1)`, []string{past, future}) != 2 {
		t.Error("the default partition's old run or the moved run is gone")
	}
	// A second rotation has nothing left to do.
	if created, dropped, err := f.st.RotateRunPartitions(ctx, later, later.Add(-30*24*time.Hour)); err != nil || created+dropped != 0 {
		t.Errorf("second rotation: created %d, dropped %d, %v", created, dropped, err)
	}
	// The batched delete (by arrival) still trims what no whole month
	// took: the default partition's old run, received long ago.
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_job_runs SET received_at = scheduled_at WHERE run_key = $1`, past)
	must(t, err)
	n, err := f.st.DeleteRunsBefore(ctx, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	must(t, err)
	if n != 1 || f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = $1`, past) != 0 {
		t.Errorf("deleted %d runs, want the run of 1999 in the default partition", n)
	}
}

// Migration 027 turns a plain history into the partitioned one keeping
// every run, its id and the id sequence (the API shows the ids): the test
// rebuilds the plain table of 026 from the migrated one, with runs of this
// month, last month and two years ago, and runs 027 again (and 029, which
// the rest of the test's writes need).
func TestMigration027KeepsRunsAndIds(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	now := time.Now().UTC().Truncate(time.Minute)
	keys := []string{f.insertRun(j, now.Add(-time.Minute)), f.insertRun(j, now.AddDate(0, -1, 0)), f.insertRun(j, now.AddDate(-2, 0, 0))}
	ids := func() map[string]int64 {
		t.Helper()
		rows, err := f.st.Pool().Query(ctx, `SELECT run_key, id FROM cron_job_runs`)
		must(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var k string
			var id int64
			must(t, rows.Scan(&k, &id))
			out[k] = id
		}
		must(t, rows.Err())
		return out
	}
	before := ids()
	unmigrate029(t, f)
	_, err := f.st.Pool().Exec(ctx, `
		ALTER SEQUENCE cron_job_runs_id_seq OWNED BY NONE;
		ALTER TABLE cron_job_runs RENAME TO runs_026;
		CREATE TABLE cron_job_runs (LIKE runs_026 INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
		INSERT INTO cron_job_runs SELECT * FROM runs_026;
		DROP TABLE runs_026;
		ALTER SEQUENCE cron_job_runs_id_seq OWNED BY cron_job_runs.id;
		ALTER TABLE cron_job_runs ADD PRIMARY KEY (id), ADD UNIQUE (run_key);`)
	must(t, err)
	for _, m := range []string{"027_partition_runs.sql", "029_run_identity_columns.sql"} {
		sql, err := os.ReadFile("migrations/" + m)
		must(t, err)
		_, err = f.st.Pool().Exec(ctx, string(sql))
		must(t, err)
	}
	if f.count(`SELECT count(*) FROM pg_partitioned_table WHERE partrelid = 'cron_job_runs'::regclass`) != 1 {
		t.Fatal("cron_job_runs is not partitioned after 027")
	}
	after := ids()
	if len(after) != len(before) {
		t.Fatalf("%d runs after 027, %d before", len(after), len(before))
	}
	for k, id := range before {
		if after[k] != id {
			t.Errorf("run %s: id %d after 027, %d before", k, after[k], id)
		}
	}
	if got := f.partitionOf(keys[2]); got != "cron_job_runs_default" {
		t.Errorf("a run of two years ago is in %s, want the default partition (13 months at most)", got)
	}
	if got, want := f.partitionOf(keys[1]), "cron_job_runs_"+now.AddDate(0, -1, 0).Format("2006_01"); got != want {
		t.Errorf("last month's run is in %s, want %s", got, want)
	}
	next := f.insertRun(j, now)
	if id := ids()[next]; id <= before[keys[0]] || id <= before[keys[2]] {
		t.Errorf("a run after 027 has id %d, not past the ones before %v", id, before)
	}
	f.outcome(j, now.Add(-2*time.Minute), wire.ResultSuccess) // the trigger and constraints are back
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND trigger = 'scheduled'`, j.ID); n != 5 {
		t.Errorf("%d scheduled runs, want 5", n)
	}
}

// Exactly once per run key, whatever the trigger, with a partitioned
// history: a duplicate report (spool retry, a second node) is recorded
// once, also when both arrive at the same time, and also a manual run
// reported again with another scheduled_at (the unique key (run_key,
// scheduled_at) alone would let that one in: the job's row lock and the
// read of the key across all months keep it out).
func TestDuplicateOutcomesRecordOneRunPerTrigger(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	slot := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
	report := func(key string, at time.Time, trigger wire.Trigger) error {
		started, finished := at.Add(time.Second), at.Add(2*time.Second)
		_, err := f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: at,
			StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess, Trigger: trigger})
		return err
	}
	for i, tc := range []struct {
		name    string
		key     string
		trigger wire.Trigger
		again   time.Time // the duplicate's scheduled_at
	}{
		{"scheduled", runkey.Scheduled(j.ID, slot), "", slot},
		{"catchup", runkey.Scheduled(j.ID, slot.Add(time.Minute)), wire.TriggerCatchUp, slot.Add(time.Minute)},
		{"retry", runkey.Retry(j.ID, slot, 2), "", slot},
		{"backfill", runkey.Backfill(j.ID, slot, "77"), "", slot},
		{"manual", runkey.Manual(j.ID, "78"), "", slot.Add(2 * time.Minute)},
		{"manual, another scheduled_at in another month", runkey.Manual(j.ID, "79"), "", slot.AddDate(0, -1, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := slot.Add(time.Duration(i) * time.Second)
			if tc.key != runkey.Manual(j.ID, "78") && tc.key != runkey.Manual(j.ID, "79") {
				at = tc.again
			}
			must(t, report(tc.key, at, tc.trigger))
			must(t, report(tc.key, tc.again, tc.trigger))
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for k := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[k] = report(tc.key, tc.again, tc.trigger) }()
			}
			wg.Wait()
			for _, err := range errs {
				must(t, err)
			}
			if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = $1`, tc.key); n != 1 {
				t.Errorf("%d runs under %s, want 1", n, tc.key)
			}
		})
	}
}

// A start report and the outcome of the same run racing each other leave
// one run, and no start reading as running once the outcome is recorded.
func TestStartAndOutcomeRaceLeaveOneRun(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(3)
	base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	for i := 0; i < 10; i++ {
		slot := base.Add(time.Duration(i) * time.Minute)
		key := runkey.Scheduled(j.ID, slot)
		var wg sync.WaitGroup
		var startErr, outErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, startErr = f.st.RecordStart(ctx, f.node, j.ID, wire.RunStart{RunKey: key, Version: j.Version, ScheduledAt: slot, StartedAt: slot.Add(time.Second)})
		}()
		go func() {
			defer wg.Done()
			started, finished := slot.Add(time.Second), slot.Add(2*time.Second)
			_, outErr = f.st.RecordOutcome(ctx, f.node, j.ID, store.Outcome{RunKey: key, Version: j.Version, ScheduledAt: slot,
				StartedAt: &started, FinishedAt: &finished, Result: wire.ResultSuccess})
		}()
		wg.Wait()
		must(t, startErr)
		must(t, outErr)
		if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE run_key = $1`, key); n != 1 {
			t.Fatalf("%d runs under %s, want 1", n, key)
		}
		running, err := f.st.RunningRuns(ctx, j.ID)
		must(t, err)
		for _, r := range running {
			if r.RunKey == key {
				t.Fatalf("%s reads as running after its outcome", key)
			}
		}
	}
}
