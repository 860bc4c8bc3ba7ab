package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
)

// fastLeader notices a lost session within a few hundred milliseconds.
var fastLeader = store.LeaderConfig{Keepalive: 100 * time.Millisecond, ConfirmTimeout: 500 * time.Millisecond,
	DutyTimeout: 5 * time.Second, LockTimeout: time.Second}

// replicas opens n stores on one database, as n core-api replicas would.
func replicas(t *testing.T, n int) []*store.Store {
	t.Helper()
	db := pgtest.NewDB(t)
	out := []*store.Store{db.Store}
	for len(out) < n {
		st, err := store.Open(context.Background(), db.DSN, 5)
		must(t, err)
		t.Cleanup(st.Close)
		out = append(out, st)
	}
	return out
}

// holder is the backend that holds the housekeeping lock, 0 if none.
func holder(t *testing.T, st *store.Store) int32 {
	t.Helper()
	var pid int32
	err := st.Pool().QueryRow(context.Background(), `SELECT coalesce((SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1), 0)`,
		int64(store.HousekeepingLeader)).Scan(&pid)
	must(t, err)
	return pid
}

func terminate(t *testing.T, st *store.Store, pid int32) {
	t.Helper()
	_, err := st.Pool().Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	must(t, err)
}

// The leader's backend is terminated (as a crash of its connection, a
// PostgreSQL restart or an operator would): the replica notices within
// its keepalive, its duties fail with ErrLeadLost, and another replica
// takes the lead; the first one takes it again once it is free.
func TestLeaderNoticesItsSessionEnded(t *testing.T) {
	ctx := context.Background()
	st := replicas(t, 2)
	a, err := st[0].TryLead(ctx, store.HousekeepingLeader, fastLeader)
	if err != nil || a == nil {
		t.Fatalf("first replica did not lead: %v", err)
	}
	defer a.Release(ctx)
	if b, err := st[1].TryLead(ctx, store.HousekeepingLeader, fastLeader); err != nil || b != nil {
		t.Fatalf("second replica led beside the first: %v %v", b, err)
	}
	must(t, a.Do(ctx, func(ctx context.Context, c store.Chores) error { return c.Ping(ctx) }))
	if got := holder(t, st[1]); got != int32(a.PID()) {
		t.Fatalf("lock held by %d, want the leader's session %d", got, a.PID())
	}

	terminate(t, st[1], int32(a.PID()))
	select {
	case <-a.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("the leader did not notice within 2s that its session ended")
	}
	if !errors.Is(a.Err(), store.ErrLeadLost) {
		t.Errorf("Err() = %v, want ErrLeadLost", a.Err())
	}
	ran := false
	if err := a.Do(ctx, func(context.Context, store.Chores) error { ran = true; return nil }); !errors.Is(err, store.ErrLeadLost) || ran {
		t.Errorf("a duty after the loss: ran %v, err %v; want not run, ErrLeadLost", ran, err)
	}

	// The settle time runs from the moment the lock is taken, inside the
	// TryLead that succeeds: measure from before that call, so a busy
	// machine cannot make a correct wait look short.
	var b *store.Leader
	var start time.Time
	for deadline := time.Now().Add(2 * time.Second); b == nil; time.Sleep(50 * time.Millisecond) {
		start = time.Now()
		if b, err = st[1].TryLead(ctx, store.HousekeepingLeader, fastLeader); err != nil || b == nil && time.Now().After(deadline) {
			t.Fatalf("second replica did not take over: %v", err)
		}
	}
	must(t, b.Do(ctx, func(ctx context.Context, c store.Chores) error { return c.Ping(ctx) }))
	if waited := time.Since(start); waited < fastLeader.Settle() {
		t.Errorf("new leader's first duty after %v, want after the settle time %v", waited, fastLeader.Settle())
	}
	b.Release(ctx)

	a2, err := st[0].TryLead(ctx, store.HousekeepingLeader, fastLeader)
	if err != nil || a2 == nil {
		t.Fatalf("first replica did not lead again after recovery: %v", err)
	}
	a2.Release(ctx)
}

// A duty whose statement never answers (a hung PostgreSQL: pg_sleep with
// statement_timeout off stands in) is cut off at DutyTimeout on the
// client, and the lead with it: the connection is closed, the lead is
// lost, and the server ends the orphaned statement and frees the lock
// for a replica whose database answers.
func TestLeaderDutyIsBounded(t *testing.T) {
	ctx := context.Background()
	st := replicas(t, 2)
	cfg := fastLeader
	cfg.DutyTimeout = 500 * time.Millisecond
	a, err := st[0].TryLead(ctx, store.HousekeepingLeader, cfg)
	if err != nil || a == nil {
		t.Fatalf("no lead: %v", err)
	}
	defer a.Release(ctx)
	var start time.Time
	err = a.Do(ctx, func(ctx context.Context, c store.Chores) error {
		start = time.Now()
		if err := c.Exec(ctx, `SET statement_timeout = 0`); err != nil {
			return err
		}
		return c.Exec(ctx, `SELECT pg_sleep(30)`)
	})
	if took := time.Since(start); err == nil || took > cfg.DutyTimeout+time.Second {
		t.Fatalf("hung duty: err %v after %v, want an error after about %v", err, took, cfg.DutyTimeout)
	}
	select {
	case <-a.Lost():
	case <-time.After(time.Second):
		t.Fatal("the lead outlived a duty cut off in a statement")
	}
	deadline := time.Now().Add(5 * time.Second)
	for holder(t, st[1]) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lock is still held 5s after the hung duty was cut off")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Three replicas run a duty in a loop while the leader's backend is
// terminated again and again: the lead moves, and no duty ever runs on two
// replicas at once.
func TestNoDutyOnTwoReplicasAtOnce(t *testing.T) {
	st := replicas(t, 4) // three replicas and the killer's connection
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var active, maxActive, duties atomic.Int32
	leaders := make([]atomic.Int32, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var l *store.Leader
			defer func() {
				if l != nil {
					l.Release(context.Background())
				}
			}()
			for ctx.Err() == nil {
				if l == nil {
					var err error
					if l, err = st[i].TryLead(ctx, store.HousekeepingLeader, fastLeader); err != nil || l == nil {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					leaders[i].Add(1)
				}
				err := l.Do(ctx, func(ctx context.Context, c store.Chores) error {
					n := active.Add(1)
					defer active.Add(-1)
					for m := maxActive.Load(); n > m && !maxActive.CompareAndSwap(m, n); m = maxActive.Load() {
					}
					duties.Add(1)
					if err := c.Ping(ctx); err != nil {
						return err
					}
					select { // work outside the database, as a duty may do
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(30 * time.Millisecond):
					}
					return c.Ping(ctx)
				})
				if errors.Is(err, store.ErrLeadLost) {
					l = nil
				}
			}
		}()
	}
	kills := 0
	for t0 := time.Now(); time.Since(t0) < 7*time.Second; time.Sleep(900 * time.Millisecond) {
		if pid := holder(t, st[3]); pid != 0 {
			terminate(t, st[3], pid)
			kills++
		}
	}
	cancel()
	wg.Wait()
	took := 0
	for i := range leaders {
		took += int(leaders[i].Load())
	}
	t.Logf("%d duties, %d leads taken, %d sessions terminated", duties.Load(), took, kills)
	if m := maxActive.Load(); m != 1 {
		t.Errorf("at most %d duties ran at once, want 1", m)
	}
	if kills < 4 || took < kills || duties.Load() < 20 {
		t.Errorf("the scenario did not exercise takeovers: %d kills, %d leads, %d duties", kills, took, duties.Load())
	}
}

// Taking the lead is bounded: with no free connection in the pool the
// attempt fails within LockTimeout instead of holding up the replica's
// housekeeping tick.
func TestTryLeadIsBounded(t *testing.T) {
	db := pgtest.NewDB(t)
	st, err := store.Open(context.Background(), db.DSN, 1)
	must(t, err)
	t.Cleanup(st.Close)
	busy, err := st.Pool().Acquire(context.Background())
	must(t, err)
	defer busy.Release()
	start := time.Now()
	l, err := st.TryLead(context.Background(), store.HousekeepingLeader, store.LeaderConfig{LockTimeout: 300 * time.Millisecond})
	if err == nil {
		l.Release(context.Background())
		t.Fatal("took the lead without a connection")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("TryLead gave up after %s, want about the 300 ms lock timeout", took)
	}
}
