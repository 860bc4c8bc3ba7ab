package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// pagesOf reads a node's set in pages of limit jobs, calling between(n)
// after the n-th page (1-based) is read.
func pagesOf(st *store.Store, node string, limit int, between func(n int)) desiredset.PageFunc {
	n := 0
	return func(ctx context.Context, after string) (wire.DesiredPage, error) {
		if n > 0 && between != nil {
			between(n)
		}
		n++
		p, _, err := st.NodeDesiredPage(ctx, node, after, limit)
		return p, err
	}
}

// aliveRevs is every job of the shard not being deleted, with its rev.
func aliveRevs(t *testing.T, st *store.Store, shardID string) map[string]uint64 {
	t.Helper()
	rows, err := st.Pool().Query(context.Background(), `SELECT j.id::text, j.rev::text::numeric FROM cron_jobs j
		JOIN tenants t ON t.id = j.tenant_id WHERE t.shard_id = $1 AND j.status <> 'deleting'`, shardID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var id string
		var rev uint64
		if err := rows.Scan(&id, &rev); err != nil {
			t.Fatal(err)
		}
		out[id] = rev
	}
	return out
}

// Pages read one after another, with writes between them: each job is
// answered for by the one page whose id range holds it, and a node judges
// it by that page's snapshot (wire.PageSnapshots.For). A job created in
// an earlier page's range after that page was read is not listed, and
// that page's snapshot does not see its write (later pages' do), so a
// node that already has it keeps it; one deleted in a later page's range
// before that page is read is not listed, and that page's snapshot sees
// the write its unit came from, so a node removes it (and records that
// snapshot in its tombstone); one deleted in an earlier page's range
// after that page is listed, as a single read before the delete would
// have listed it (its delete removes it).
func TestNodeDesiredPagesAnswerEachJobOnce(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	b := newShard(t, st, "web2", "other")
	b.job(t, st, "elsewhere")
	for range 9 {
		a.job(t, st, "true")
	}
	before := aliveRevs(t, st, a.id)
	var ids []string
	for _, j := range mustSet(t, st, a.nodes["node1"]).Jobs {
		ids = append(ids, j.ID)
	}
	// Pages of 3: ids[0..2], ids[3..5], ids[6..8].
	const early = "00000000-0000-4000-8000-000000000001" // sorts into page 1's range
	var earlyRev uint64
	set, err := desiredset.Assemble(ctx, pagesOf(st, a.nodes["node1"], 3, func(n int) {
		if n != 1 {
			return
		}
		if err := st.Pool().QueryRow(ctx, `INSERT INTO cron_jobs (id, tenant_id, webroot_id, schedule, command)
			VALUES ($1, $2, $3, '*/5 * * * *', 'late') RETURNING rev::text::numeric`, early, a.tenant, a.webroot).Scan(&earlyRev); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{ids[1], ids[7]} {
			if _, err := st.DeleteJob(ctx, id, 0); err != nil {
				t.Fatal(err)
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, j := range set.Jobs {
		if listed[j.ID] {
			t.Errorf("job %s listed twice", j.ID)
		}
		listed[j.ID] = true
	}
	for i, id := range ids {
		if want := i != 7; listed[id] != want {
			t.Errorf("job %d (%s) listed: %v, want %v", i, id, listed[id], want)
		}
	}
	if len(set.Jobs) != 8 {
		t.Errorf("%d jobs, want the 8 of this shard not deleted before their page", len(set.Jobs))
	}
	earlyPage, _ := set.Pages.For(early)
	if listed[early] || earlyPage.Sees(earlyRev) || set.Snapshot.Sees(earlyRev) {
		t.Errorf("the job created behind the cursor: listed %v, its page's snapshot %+v (the set's %+v) sees its write %d: a node would remove it",
			listed[early], earlyPage, set.Snapshot, earlyRev)
	}
	if len(set.Pages) != 3 || !set.Pages[2].Snapshot.Sees(earlyRev) {
		t.Errorf("pages %+v: want 3, the last seeing the write %d (so judging by the wrong page would remove a live job)", set.Pages, earlyRev)
	}
	deletedPage, _ := set.Pages.For(ids[7])
	if !deletedPage.Sees(before[ids[7]]) {
		t.Errorf("its page's snapshot %+v does not see the write %d of the job deleted before that page: its unit would stay", deletedPage, before[ids[7]])
	}
}

// Under concurrent creates and deletes, pages still list each job at most
// once and in order, every job untouched throughout exactly once, and no
// job alive at the end that the set lacks has a write the snapshot of the
// page holding its id saw (a node would remove a live job); other shards'
// jobs never.
func TestNodeDesiredPagesUnderConcurrentWrites(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	b := newShard(t, st, "web2", "other")
	foreign := b.job(t, st, "elsewhere")
	stable := map[string]bool{}
	for range 40 {
		stable[a.job(t, st, "stable").ID] = true
	}
	var doomed []string
	for range 20 {
		doomed = append(doomed, a.job(t, st, "doomed").ID)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churnErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, _, err := st.CreateJob(ctx, a.tenant, store.JobFields{WebrootID: a.webroot, Schedule: "*/5 * * * *",
				Timezone: "UTC", Command: "churn", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 128, MaxFailures: 3}, nil); err != nil {
				churnErr = err
				return
			}
			if i < len(doomed) {
				if _, err := st.DeleteJob(ctx, doomed[i], 0); err != nil {
					churnErr = err
					return
				}
			}
		}
	}()
	var set wire.DesiredSet
	var err error
	for range 5 { // several passes, so pages meet the churn
		if set, err = desiredset.Assemble(ctx, pagesOf(st, a.nodes["node1"], 4, nil)); err != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	if err != nil || churnErr != nil {
		t.Fatal(err, churnErr)
	}
	listed := map[string]bool{}
	for _, j := range set.Jobs {
		if listed[j.ID] {
			t.Errorf("job %s listed twice", j.ID)
		}
		listed[j.ID] = true
	}
	for id := range stable {
		if !listed[id] {
			t.Errorf("untouched job %s missing", id)
		}
	}
	if listed[foreign.ID] {
		t.Error("another shard's job listed")
	}
	for id, rev := range aliveRevs(t, st, a.id) {
		page, ok := set.Pages.For(id)
		if !listed[id] && (!ok || page.Sees(rev)) {
			t.Errorf("live job %s is not listed, but the snapshot %+v of its page saw its write %d: a node would remove it", id, page, rev)
		}
	}
}

// A page is bounded, and an unknown node has no set.
func TestNodeDesiredPageBounds(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	if _, _, err := st.NodeDesiredPage(ctx, a.nodes["node1"], "", wire.MaxDesiredPageSize+1); err == nil {
		t.Error("a page over the bound was served")
	}
	if _, ok, err := st.NodeDesiredPage(ctx, "00000000-0000-0000-0000-000000000000", "", 10); err != nil || ok {
		t.Errorf("unknown node: ok=%v, err=%v; want not ok and no error", ok, err)
	}
	p, ok, err := st.NodeDesiredPage(ctx, a.nodes["node1"], "", 10)
	if err != nil || !ok || p.Jobs == nil || len(p.Jobs) != 0 || p.Next != "" || p.Snapshot.Xmax == 0 {
		t.Errorf("empty shard: %+v, %v, %v; want an empty last page with its snapshot", p, ok, err)
	}
}

func mustSet(t *testing.T, st *store.Store, node string) wire.DesiredSet {
	t.Helper()
	set, ok, err := st.NodeDesiredJobs(context.Background(), node)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	return set
}
