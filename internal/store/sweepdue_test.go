package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// sweepState is where a job's sweep stands and when it is next due.
func (f *fixture) sweepState(id string) (swept, due *time.Time) {
	f.t.Helper()
	must(f.t, f.st.Pool().QueryRow(context.Background(),
		`SELECT swept_until, sweep_due_at FROM cron_jobs WHERE id = $1`, id).Scan(&swept, &due))
	return swept, due
}

// rowVersion is the row's xmin: it changes with every write of the row.
func (f *fixture) rowVersion(id string) string {
	f.t.Helper()
	var x string
	must(f.t, f.st.Pool().QueryRow(context.Background(), `SELECT xmin::text FROM cron_jobs WHERE id = $1`, id).Scan(&x))
	return x
}

// sweep_due_at follows every change of what it depends on: NULL while
// nothing is to be swept (created, pending, disabled, a schedule no node
// has yet), a lower bound (swept_until + timeout) when a provisioning or
// an outcome starts the sweep or another write moves it, and the exact
// end of the next slot once a pass has visited the job.
func TestSweepDueAtFollowsTheJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5}, nil)
	must(t, err)
	const timeout = time.Minute
	isNull := func(step string) {
		t.Helper()
		if _, due := f.sweepState(j.ID); due != nil {
			t.Errorf("%s: sweep_due_at %v, want NULL", step, *due)
		}
	}
	isBound := func(step string) {
		t.Helper()
		swept, due := f.sweepState(j.ID)
		from := f.get(j.ID).NotBefore // never before not_before
		if swept != nil && swept.After(from) {
			from = *swept
		}
		if swept == nil || due == nil || !due.Equal(from.Add(timeout)) {
			t.Errorf("%s: swept_until %v, sweep_due_at %v; want (swept_until or not_before) + timeout", step, swept, due)
		}
	}
	update := func(m func(*store.JobFields)) {
		t.Helper()
		_, err := f.st.UpdateJob(ctx, j.ID, 0, func(x store.JobFields) (store.JobFields, error) { m(&x); return x, nil })
		must(t, err)
	}

	isNull("created, no node has it")
	f.activate(j.ID)
	isBound("provisioned")

	// A pass stores the exact end of the next slot not swept.
	now := time.Now().Truncate(time.Minute).Add(10*time.Minute + 5*time.Second) // the next 30 s cross no slot
	_, err = f.st.SweepLostRuns(ctx, now, time.Minute)
	must(t, err)
	swept, due := f.sweepState(j.ID)
	cutoff := now.Add(-timeout - time.Minute)
	want := cutoff.Truncate(time.Minute).Add(time.Minute).Add(timeout)
	if swept == nil || !swept.Equal(cutoff.Truncate(time.Microsecond)) || due == nil || !due.Equal(want) {
		t.Fatalf("after a pass: swept_until %v, sweep_due_at %v; want %v, %v", swept, due, cutoff, want)
	}
	// A pass before that is due does not touch the row.
	before := f.rowVersion(j.ID)
	rep, err := f.st.SweepLostRuns(ctx, now.Add(30*time.Second), time.Minute)
	must(t, err)
	if after := f.rowVersion(j.ID); after != before || rep.Lost != 0 {
		t.Errorf("a pass with nothing due wrote the job (xmin %s -> %s) or recorded %d lost", before, after, rep.Lost)
	}

	update(func(x *store.JobFields) { x.Command = "false" })
	isNull("command edit, pending")
	f.activate(j.ID)
	isBound("command edit provisioned: the sweep goes on where it stood")
	if s, _ := f.sweepState(j.ID); s == nil || !s.Equal(*swept) {
		t.Errorf("a command edit moved swept_until: %v, want %v", s, swept)
	}

	_, err = f.st.DisableJob(ctx, j.ID, 0)
	must(t, err)
	isNull("disabled")
	ok, err := f.st.SetProvisioned(ctx, j.ID, f.get(j.ID).Version, wire.StatusDisabled, "", 1)
	if err != nil || !ok {
		t.Fatalf("SetProvisioned: %v %v", ok, err)
	}
	isNull("disabled on the nodes")

	_, err = f.st.EnableJob(ctx, j.ID, 0)
	must(t, err)
	isNull("enabled, no node has it yet")
	f.activate(j.ID)
	isBound("enable provisioned")

	update(func(x *store.JobFields) { x.Schedule = "*/5 * * * *" })
	isNull("schedule change, no node has it yet")
	// Every node refused it: failed, and no node has the schedule.
	ok, err = f.st.SetProvisioned(ctx, j.ID, f.get(j.ID).Version, wire.StatusFailed, "not provisioned on node1: down", 0)
	if err != nil || !ok {
		t.Fatalf("SetProvisioned: %v %v", ok, err)
	}
	isNull("failed, no node has the schedule")
	// A node reports a run of the current version: the sweep starts at
	// its slot.
	slot := time.Now().UTC().Truncate(5 * time.Minute)
	f.outcome(f.get(j.ID), slot, wire.ResultSuccess)
	isBound("an outcome started the sweep")
	if s, _ := f.sweepState(j.ID); s == nil || !s.Equal(slot) {
		t.Errorf("swept_until %v, want the reported slot %v", s, slot)
	}

	// A write that does not set the column (an older replica's sweep,
	// an operator's fix) gets the lower bound.
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = $2, not_before = $2 WHERE id = $1`, j.ID, at)
	must(t, err)
	isBound("swept_until written alone")
	_, err = f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET timeout_seconds = 600 WHERE id = $1`, j.ID)
	must(t, err)
	if _, due := f.sweepState(j.ID); due == nil || !due.Equal(at.Add(600*time.Second)) {
		t.Errorf("timeout changed: sweep_due_at %v, want %v", due, at.Add(600*time.Second))
	}
}

// A job made active by a replica from before migration 005 (swept_until
// NULL) is due from its verdict, and swept from it once its shard has a
// node; before that every pass looks at it again.
func TestSweepDueAtOfAnOldReplicasActiveJob(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0)
	verdict := time.Now().UTC().Truncate(time.Minute).Add(-30*time.Minute + time.Second)
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET swept_until = NULL, updated_at = $2, not_before = $2::timestamptz - interval '1 hour' WHERE id = $1`,
		j.ID, verdict)
	must(t, err)
	if _, due := f.sweepState(j.ID); due == nil || !due.Equal(verdict.Add(time.Minute)) {
		t.Fatalf("sweep_due_at %v, want the verdict + timeout %v", due, verdict.Add(time.Minute))
	}
	_, err = f.st.Pool().Exec(ctx, `UPDATE nodes SET draining = true`)
	must(t, err)
	rep, err := f.st.SweepLostRuns(ctx, time.Now(), time.Minute)
	must(t, err)
	if rep.Lost != 0 {
		t.Errorf("%d lost runs on a shard without a node", rep.Lost)
	}
	if _, due := f.sweepState(j.ID); due == nil || !due.Equal(verdict.Add(time.Minute)) {
		t.Errorf("sweep_due_at %v, want still %v (looked at again next pass)", due, verdict.Add(time.Minute))
	}
	_, err = f.st.Pool().Exec(ctx, `UPDATE nodes SET draining = false`)
	must(t, err)
	rep, err = f.st.SweepLostRuns(ctx, time.Now(), time.Minute)
	must(t, err)
	if rep.Lost < 26 || rep.Lost > 29 {
		t.Errorf("%d lost runs, want the ~28 slots since the verdict", rep.Lost)
	}
	if n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND scheduled_at < $2`, j.ID, verdict); n != 0 {
		t.Errorf("%d lost runs before the verdict", n)
	}
}

// Batches: jobs over several batches are each swept once, a job whose
// schedule no longer parses is skipped and reported in its batch (its
// row unchanged, looked at again by the next pass) without holding up
// the others, and a job whose row another transaction holds for a moment
// is swept on its own once it is free, not skipped.
func TestSweepBatchesWithABadRow(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	defer store.SetSweepBatch(store.SetSweepBatch(3))
	from := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	var jobs []store.CronJob
	for i := 0; i < 8; i++ {
		j := f.job(0)
		f.sweepFrom(j.ID, from.Add(time.Duration(i)*time.Second)) // due in this order
		jobs = append(jobs, j)
	}
	bad := jobs[4] // second batch
	_, err := f.st.Pool().Exec(ctx, `UPDATE cron_jobs SET schedule = 'not a schedule' WHERE id = $1`, bad.ID)
	must(t, err)
	badSwept, badDue := f.sweepState(bad.ID)

	// Hold one row of the third batch for a moment.
	held := jobs[7]
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SELECT 1 FROM cron_jobs WHERE id = $1 FOR UPDATE`, held.ID)
	must(t, err)
	release := time.AfterFunc(300*time.Millisecond, func() { _ = tx.Rollback(context.Background()) })
	defer release.Stop()

	now := from.Add(10 * time.Minute)
	rep, err := f.st.SweepLostRuns(ctx, now, time.Minute)
	must(t, err)
	if len(rep.Skipped) != 1 || rep.Skipped[0].ID != bad.ID || rep.Skipped[0].Err == nil {
		t.Errorf("skipped %+v, want the bad job alone", rep.Skipped)
	}
	total := 0
	for _, j := range jobs {
		n := f.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, j.ID)
		dup := f.count(`SELECT count(*) FROM (SELECT scheduled_at FROM cron_job_runs WHERE cron_job_id = $1
			GROUP BY scheduled_at HAVING count(*) > 1) d`, j.ID)
		switch {
		case j.ID == bad.ID && n != 0:
			t.Errorf("bad job: %d lost rows", n)
		case j.ID != bad.ID && n != 8: // slots from+1m .. from+8m ended by now - 1m - 1m
			t.Errorf("job %s: %d lost rows, want 8", j.ID, n)
		case dup != 0:
			t.Errorf("job %s: %d slots recorded twice", j.ID, dup)
		}
		total += n
	}
	if rep.Lost != total {
		t.Errorf("report says %d lost, history has %d", rep.Lost, total)
	}
	if s, d := f.sweepState(bad.ID); fmt.Sprint(s, d) != fmt.Sprint(badSwept, badDue) {
		t.Errorf("bad job's sweep moved: %v %v, was %v %v", s, d, badSwept, badDue)
	}
	again, err := f.st.SweepLostRuns(ctx, now, time.Minute)
	must(t, err)
	if again.Lost != 0 || len(again.Skipped) != 1 || again.Skipped[0].ID != bad.ID {
		t.Errorf("second pass: %+v, want nothing lost and the bad job reported again", again)
	}
}
