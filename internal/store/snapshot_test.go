package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// A converge's snapshot must tell "deleted before the snapshot" from
// "written by a transaction the snapshot did not see", also across
// commit-order gaps: a transaction that took a lower id and commits after
// the snapshot is unseen although a higher one was seen (a plain sequence
// maximum would count it as seen, and its job as deleted).
func TestDesiredSnapshotSeesOnlyFinishedWrites(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	node := a.nodes["node1"]
	kept := a.job(t, st, "kept")

	// Transaction slow writes a job first (the lower id) and commits last.
	slow, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	slowID, slowRev := insertJob(t, slow, a, "slow")
	fast := a.job(t, st, "fast") // a higher id, committed now
	fastRev := desiredRev(t, st, node, fast.ID)
	if fastRev <= slowRev {
		t.Fatalf("fast write %d is not above the slow one %d; the test needs the gap", fastRev, slowRev)
	}

	set, ok, err := st.NodeDesiredJobs(ctx, node)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if hasJob(set, slowID) {
		t.Fatal("an uncommitted job is in the desired set")
	}
	if set.Snapshot.Sees(slowRev) {
		t.Errorf("snapshot %+v sees the uncommitted write %d: a node would remove the job as deleted", set.Snapshot, slowRev)
	}
	if !set.Snapshot.Sees(fastRev) || !hasJob(set, fast.ID) || !hasJob(set, kept.ID) {
		t.Errorf("snapshot %+v with %d jobs misses the committed write %d", set.Snapshot, len(set.Jobs), fastRev)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Committed after the snapshot: that snapshot still does not see it (a
	// node that got the job from its workflow keeps it), the next one does.
	if set.Snapshot.Sees(slowRev) {
		t.Error("an old snapshot sees a write committed after it")
	}
	if next, _, err := st.NodeDesiredJobs(ctx, node); err != nil || !hasJob(next, slowID) || !next.Snapshot.Sees(slowRev) {
		t.Errorf("next snapshot %+v: has the job %v, sees its write %v, err %v", next.Snapshot, hasJob(next, slowID), next.Snapshot.Sees(slowRev), err)
	}

	// A deleted job is absent from a later snapshot, which sees the write
	// its units came from: an orphan.
	keptRev := desiredRev(t, st, node, kept.ID)
	if _, err := st.DeleteJob(ctx, kept.ID, 0); err != nil {
		t.Fatal(err)
	}
	after, _, err := st.NodeDesiredJobs(ctx, node)
	if err != nil || hasJob(after, kept.ID) || !after.Snapshot.Sees(keptRev) {
		t.Errorf("after the delete: has the job %v, sees its write %v, err %v", hasJob(after, kept.ID), after.Snapshot.Sees(keptRev), err)
	}
}

// Every new version records its writing transaction; a status-only write
// (provisioning's verdict) keeps the version and the revision.
func TestRevFollowsVersion(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	j := a.job(t, st, "one")
	p1, err := st.JobPlan(ctx, j.ID)
	if err != nil || p1.Job.Rev == 0 {
		t.Fatalf("created job: rev %d, %v", p1.Job.Rev, err)
	}
	if _, err := st.SetProvisioned(ctx, j.ID, j.Version, wire.StatusActive, "", 1); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.JobPlan(ctx, j.ID); p.Job.Rev != p1.Job.Rev {
		t.Errorf("status-only write changed rev %d → %d", p1.Job.Rev, p.Job.Rev)
	}
	if _, err := st.UpdateJob(ctx, j.ID, 0, func(f store.JobFields) (store.JobFields, error) { f.Command = "two"; return f, nil }); err != nil {
		t.Fatal(err)
	}
	if p, _ := st.JobPlan(ctx, j.ID); p.Job.Rev == p1.Job.Rev || p.Version != j.Version+1 {
		t.Errorf("update: version %d rev %d, want version %d and a new rev (was %d)", p.Version, p.Job.Rev, j.Version+1, p1.Job.Rev)
	}
}

// After a logical restore the rows keep revisions from the old cluster's
// counter, above the new one's: the converge refuses to send a set whose
// snapshot does not see its own rows.
func TestDesiredSetRefusesRevisionsAhead(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	j := a.job(t, st, "one")
	// A status-like write that keeps the version keeps the rev it sets.
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET rev = '900000000000'::xid8 WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.NodeDesiredJobs(ctx, a.nodes["node1"]); !errors.Is(err, wire.ErrRevisionsAhead) {
		t.Errorf("desired set with a revision ahead of the counter: %v, want ErrRevisionsAhead", err)
	}
	// The operator's fix: every row gets a revision of the new counter.
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET rev = pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	if set, _, err := st.NodeDesiredJobs(ctx, a.nodes["node1"]); err != nil || !hasJob(set, j.ID) {
		t.Errorf("after renumbering the revisions: %v", err)
	}
}

// insertJob writes a job in tx, uncommitted, and returns its id and rev.
func insertJob(t *testing.T, tx pgx.Tx, s shard, command string) (string, uint64) {
	t.Helper()
	var id string
	var rev uint64
	err := tx.QueryRow(context.Background(), `INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, command)
		VALUES ($1, $2, '*/5 * * * *', $3) RETURNING id, rev::text::numeric`, s.tenant, s.webroot, command).Scan(&id, &rev)
	if err != nil {
		t.Fatal(err)
	}
	return id, rev
}

func desiredRev(t *testing.T, st *store.Store, node, jobID string) uint64 {
	t.Helper()
	set, _, err := st.NodeDesiredJobs(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range set.Jobs {
		if j.ID == jobID {
			return j.Rev
		}
	}
	t.Fatalf("job %s not in the desired set", jobID)
	return 0
}

func hasJob(set wire.DesiredSet, id string) bool {
	for _, j := range set.Jobs {
		if j.ID == id {
			return true
		}
	}
	return false
}
