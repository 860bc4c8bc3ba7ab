package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
)

// Queuing a task through the store (here a create; every path that queues
// calls wakeDispatchers) notifies a listening session, and the task is
// claimable when the notification arrives: it is sent at commit.
// A Wait that gives up on its context leaves the session listening.
func TestQueuingNotifiesTheOutboxListener(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l, err := f.st.ListenOutbox(ctx)
	must(t, err)
	defer l.Close()

	quiet, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err = l.Wait(quiet)
	cancel()
	if err == nil {
		t.Fatal("a notification before anything was queued")
	}
	must(t, l.Ping(ctx))

	j, _, err := f.st.CreateJob(ctx, f.tenant, store.JobFields{WebrootID: f.webroot, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64}, nil)
	must(t, err)
	guard, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must(t, l.Wait(guard))
	tasks, err := f.st.ClaimTasks(ctx, 10, time.Minute)
	must(t, err)
	if len(tasks) != 1 || tasks[0].CronJobID != j.ID {
		t.Fatalf("claimed %+v after the notification, want job %s's create", tasks, j.ID)
	}
}

// Every store write that queues a task wakes the dispatchers once it has
// committed (the notify is outside the transaction since it would
// otherwise serialise commits database-wide), and one that fails wakes
// nobody.
func TestEveryQueuingWriteWakesTheDispatchers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	j := f.job(0) // active, its create's task claimed
	l, err := f.st.ListenOutbox(ctx)
	must(t, err)
	defer l.Close()
	heard := func(what string, want bool) {
		t.Helper()
		wait := 20 * time.Millisecond // long enough for a notification already sent
		if want {
			wait = 30 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if got := l.Wait(wctx) == nil; got != want {
			t.Errorf("%s: dispatchers woken %v, want %v", what, got, want)
		}
		must(t, l.Ping(ctx))
	}
	heard("nothing queued", false)
	_, _, err = f.st.RunNow(ctx, j.ID, 0)
	must(t, err)
	heard("run-now", true)
	_, err = f.st.DisableJob(ctx, j.ID, 0)
	must(t, err)
	heard("disable", true)
	if _, err = f.st.EnableJob(ctx, j.ID, 1); err == nil {
		t.Fatal("enable at a stale version succeeded")
	}
	heard("a refused enable", false)
}
