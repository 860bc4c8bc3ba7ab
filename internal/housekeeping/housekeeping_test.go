package housekeeping

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// jobWithMissedSlots stores an every-minute job in status whose slots of
// the last hour were never reported.
func jobWithMissedSlots(t *testing.T, st *store.Store, tenant string, status wire.Status) string {
	t.Helper()
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, "shard-"+tenant, "/srv/shared/www")
	if err != nil {
		t.Fatal(err)
	}
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: tenant, ShardID: sh.ID, LinuxUser: tenant, LinuxGroup: tenant})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/shared/www/"+tenant+"/public")
	if err != nil {
		t.Fatal(err)
	}
	job, _, err := st.CreateJob(ctx, tn.ID, store.JobFields{WebrootID: wr.ID, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 30, MaxMemoryMB: 64, MaxFailures: 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET status = $2, swept_until = now() - interval '1 hour', not_before = now() - interval '1 hour' WHERE id = $1`,
		job.ID, status); err != nil {
		t.Fatal(err)
	}
	return job.ID
}

func lostRuns(t *testing.T, st *store.Store, jobID string) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1 AND result = $2`, jobID, wire.ResultLost).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func housekeeper(st *store.Store) *Housekeeper {
	return &Housekeeper{Store: st, Config: Config{Grace: time.Minute, Leader: store.LeaderConfig{
		Keepalive: 100 * time.Millisecond, ConfirmTimeout: 500 * time.Millisecond}},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestOneReplicaSweeps: two replicas tick at once; one leads and sweeps,
// the other does nothing, and the lead passes on when the leader stops.
func TestOneReplicaSweeps(t *testing.T) {
	st := pgtest.New(t)
	active := jobWithMissedSlots(t, st, "acme", wire.StatusActive)
	failed := jobWithMissedSlots(t, st, "bravo", wire.StatusFailed)
	a, b := housekeeper(st), housekeeper(st)
	defer a.Release()
	defer b.Release()

	now := time.Now()
	var wg sync.WaitGroup
	led := make([]bool, 2)
	for i, h := range []*Housekeeper{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if led[i], err = h.Tick(context.Background(), now); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if led[0] == led[1] {
		t.Fatalf("led = %v; want exactly one replica to sweep", led)
	}
	// ~58 slots of the last hour ended more than timeout + grace ago.
	n := lostRuns(t, st, active)
	if n < 55 || n > 60 {
		t.Errorf("active job: %d lost runs recorded, want one per missed slot (about 58)", n)
	}
	if m := lostRuns(t, st, failed); m != n {
		t.Errorf("failed job: %d lost runs, want %d like the active job (failed jobs are swept too)", m, n)
	}

	leader, follower := a, b
	if led[1] {
		leader, follower = b, a
	}
	if ok, _ := follower.Tick(context.Background(), now); ok {
		t.Fatal("the follower swept while the leader holds the lock")
	}
	leader.Release()
	if ok, err := follower.Tick(context.Background(), now); !ok || err != nil {
		t.Fatalf("the follower did not take over after the leader left: %v %v", ok, err)
	}
	if got := lostRuns(t, st, active); got != n {
		t.Errorf("after the second sweep %d lost runs, want still %d", got, n)
	}
}

// The leading replica's session is terminated in PostgreSQL: it stops
// leading (its next tick sweeps nothing and says so), the other replica
// takes over and sweeps, and no slot gets a second lost row.
func TestLeadMovesWhenTheLeadersSessionEnds(t *testing.T) {
	db := pgtest.NewDB(t)
	st := db.Store
	st2, err := store.Open(context.Background(), db.DSN, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	job := jobWithMissedSlots(t, st, "acme", wire.StatusActive)
	a, b := housekeeper(st), housekeeper(st2)
	defer a.Release()
	defer b.Release()
	ctx := context.Background()
	now := time.Now()
	if led, err := a.Tick(ctx, now); !led || err != nil {
		t.Fatalf("first replica: led %v, %v", led, err)
	}
	n := lostRuns(t, st, job)
	if led, _ := b.Tick(ctx, now); led {
		t.Fatal("second replica swept while the first leads")
	}

	if _, err := st2.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, int32(a.leader.PID())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.leader.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("the leader did not notice its session ended")
	}
	// Both tick as the next interval comes: the lock is free, the first
	// to ask takes it; whoever leads sweeps, and only once.
	later := now.Add(3 * time.Minute)
	ledB, err := b.Tick(ctx, later)
	if err != nil || !ledB {
		t.Fatalf("second replica did not take over: led %v, %v", ledB, err)
	}
	if ledA, _ := a.Tick(ctx, later); ledA {
		t.Fatal("the old leader swept beside the new one")
	}
	if got := lostRuns(t, st, job); got < n+2 || got > n+4 {
		t.Errorf("%d lost runs after the takeover's sweep, want %d and the 3 minutes since", got, n)
	}
	var dup int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT scheduled_at FROM cron_job_runs WHERE cron_job_id = $1
		GROUP BY scheduled_at HAVING count(*) > 1) d`, job).Scan(&dup); err != nil || dup != 0 {
		t.Errorf("%d slots with more than one row (%v)", dup, err)
	}
}

// A housekeeping round prunes outbox rows dispatched longer than
// PruneAfter ago, and only those: a recent one stays, and so does an old
// row that never went out.
func TestTickPrunesDispatchedRows(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	job := jobWithMissedSlots(t, st, "acme", wire.StatusActive)
	ids := map[string]int64{}
	for name, dispatched := range map[string]string{"old": "now() - interval '2 hours'", "recent": "now() - interval '10 minutes'", "pending": "NULL"} {
		var id int64
		if err := st.Pool().QueryRow(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version, created_at, dispatched_at)
			VALUES ($1, $2, 1, now() - interval '3 hours', `+dispatched+`) RETURNING id`, job, wire.ActionUpdate).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	h := housekeeper(st) // PruneAfter: the default hour
	defer h.Release()
	if led, err := h.Tick(ctx, time.Now()); !led || err != nil {
		t.Fatalf("tick: led %v, %v", led, err)
	}
	for name, want := range map[string]bool{"old": false, "recent": true, "pending": true} {
		var n int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM cron_job_tasks WHERE id = $1`, ids[name]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n == 1) != want {
			t.Errorf("%s row: present %v, want %v", name, n == 1, want)
		}
	}
}

// A job whose stored schedule no longer parses is skipped, logged and
// counted (hostcron_sweep_skipped_jobs_total); the round goes on: the
// other job is swept and the later chores run.
func TestTickSkipsABadRowAndCountsIt(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	bad := jobWithMissedSlots(t, st, "acme", wire.StatusActive)
	good := jobWithMissedSlots(t, st, "bravo", wire.StatusActive)
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET schedule = 'not a schedule' WHERE id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	var old int64
	if err := st.Pool().QueryRow(ctx, `INSERT INTO cron_job_tasks (cron_job_id, action, version, dispatched_at)
		VALUES ($1, $2, 1, now() - interval '2 hours') RETURNING id`, good, wire.ActionUpdate).Scan(&old); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	reg := prometheus.NewRegistry()
	h := housekeeper(st)
	h.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := reg.Register(h.skippedCounter()); err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if led, err := h.Tick(ctx, time.Now()); !led || err != nil {
		t.Fatalf("tick: led %v, %v", led, err)
	}
	if n := lostRuns(t, st, good); n < 55 {
		t.Errorf("good job: %d lost runs, want its missed slots swept despite the bad row", n)
	}
	if n := lostRuns(t, st, bad); n != 0 {
		t.Errorf("bad job: %d lost runs", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	skipped := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "hostcron_sweep_skipped_jobs_total" && len(mf.GetMetric()) == 1 {
			skipped = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if skipped != 1 {
		t.Errorf("hostcron_sweep_skipped_jobs_total = %v, want 1", skipped)
	}
	if !strings.Contains(logs.String(), "sweep skipped a cron job") || !strings.Contains(logs.String(), bad) {
		t.Errorf("the skip was not logged with the job id:\n%s", logs.String())
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM cron_job_tasks WHERE id = $1`, old).Scan(&n); err != nil || n != 0 {
		t.Errorf("the round stopped at the bad row: the old outbox row is still there (%d, %v)", n, err)
	}
}

// The leader's tick reports a node that has not converged for longer than
// the threshold to the operator's targets, once per window.
func TestTickReportsNodesNotConverged(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	if err != nil {
		t.Fatal(err)
	}
	node, _, err := st.CreateNode(ctx, sh.ID, "node1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateOperatorTarget(ctx, store.NotificationTarget{Kind: "webhook", URL: "https://ops.example.com/",
		Events: []string{"node_not_converged"}}); err != nil {
		t.Fatal(err)
	}
	h := housekeeper(st)
	defer h.Release()
	events := func() (n int) {
		t.Helper()
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM notification_events WHERE kind = 'node_not_converged'
			AND payload->'examples'->0->>'node_id' = $1`, node.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := h.Tick(ctx, time.Now()); err != nil || events() != 0 {
		t.Fatalf("a new node reported: %d events, %v", events(), err)
	}
	later := time.Now().Add(time.Hour)
	for i := 0; i < 2; i++ {
		if led, err := h.Tick(ctx, later); !led || err != nil {
			t.Fatalf("tick: %v %v", led, err)
		}
	}
	if n := events(); n != 1 {
		t.Errorf("%d node_not_converged events, want 1", n)
	}
}

func TestConvergeThresholdFor(t *testing.T) {
	for _, tc := range []struct {
		every, want time.Duration
	}{
		{0, -1}, // no schedule: no periodic check
		{10 * time.Minute, notify.ConvergeThreshold},
		{30 * time.Minute, 90 * time.Minute},
		{6 * time.Hour, 18 * time.Hour},
	} {
		if got := ConvergeThresholdFor(tc.every); got != tc.want {
			t.Errorf("ConvergeThresholdFor(%v) = %v, want %v", tc.every, got, tc.want)
		}
	}
}
