package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
)

// Concurrent creates at one below the limit (two requests together, or
// two core-api replicas) pass it once between them: each counts after it
// holds the tenant's row. A count in the locking statement itself read
// that statement's snapshot, from before the lock wait, and every create
// that had waited passed (all five here).
func TestConcurrentTargetCreatesStopAtTheLimit(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for i := 0; i < store.MaxTargetsPerTenant-1; i++ {
		f.target(f.tenant, nil, "run_failed")
	}
	// Hold the tenant's row so that both creates take their snapshot and
	// then wait on the lock, as two requests arriving together do.
	tx, err := f.st.Pool().Begin(ctx)
	must(t, err)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE`, f.tenant); err != nil {
		t.Fatal(err)
	}
	const racers = 5
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = f.st.CreateTarget(ctx, store.NotificationTarget{TenantID: f.tenant, Kind: "webhook",
				URL: fmt.Sprintf("https://hooks.example.com/race/%d", i), Secret: "s", Events: []string{"run_failed"}})
		}()
	}
	f.waitForLockWaiters("%tenants%FOR UPDATE%", racers)
	must(t, tx.Commit(ctx))
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrTooManyTargets):
			t.Fatal(err)
		}
	}
	ts, err := f.st.ListTargets(ctx, f.tenant)
	must(t, err)
	if len(ts) != store.MaxTargetsPerTenant || ok != 1 {
		t.Fatalf("%d of %d concurrent creates passed: the tenant has %d targets, limit %d",
			ok, racers, len(ts), store.MaxTargetsPerTenant)
	}
}

// waitForLockWaiters waits until n statements like pattern (a LIKE
// pattern) wait on a lock, as racers held behind a test's open
// transaction do.
func (f *fixture) waitForLockWaiters(pattern string, n int) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting := f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1`, pattern)
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%d statements like %q waiting on a lock, want %d", waiting, pattern, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
