package unitmgr

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestJobSignals: the private socket's handler passes go-systemd JobRemoved
// (its job-completion channels) and drops the signals nothing subscribed
// to; closing the connection closes the registered channel, as godbus's
// default handler does (go-systemd's dispatcher then ends).
func TestJobSignals(t *testing.T) {
	h := newJobSignals(nil)
	ch := make(chan *dbus.Signal, 10)
	h.AddSignal(ch)
	for _, name := range []string{
		"org.freedesktop.systemd1.Manager.UnitNew",
		"org.freedesktop.DBus.Properties.PropertiesChanged",
		"org.freedesktop.systemd1.Manager.JobNew",
		jobRemoved,
		"org.freedesktop.systemd1.Manager.UnitRemoved",
	} {
		i := strings.LastIndex(name, ".")
		h.DeliverSignal(name[:i], name[i+1:], &dbus.Signal{Name: name, Path: "/org/freedesktop/systemd1"})
	}
	select {
	case s := <-ch:
		if s.Name != jobRemoved {
			t.Fatalf("delivered %s", s.Name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("JobRemoved not delivered")
	}
	select {
	case s := <-ch:
		t.Fatalf("delivered %s too", s.Name)
	default:
	}
	var _ dbus.Terminator = h
	h.Terminate()
	if _, open := <-ch; open {
		t.Fatal("channel not closed by Terminate")
	}
}

// TestPendingJobs: a wait is for the listed jobs of its units that have
// not ended since it started watching.
func TestPendingJobs(t *testing.T) {
	units := map[string]bool{"a.timer": true, "b.timer": true}
	for _, tc := range []struct {
		name   string
		listed []queuedJob
		ended  map[uint32]bool
		want   []uint32
	}{
		{"nothing queued", nil, nil, nil},
		{"other units' jobs", []queuedJob{{1, "c.timer"}, {2, "d.service"}}, nil, nil},
		{"ours queued", []queuedJob{{1, "a.timer"}, {2, "c.timer"}, {3, "b.timer"}}, nil, []uint32{1, 3}},
		{"ended before the listing's reply was read", []queuedJob{{1, "a.timer"}, {3, "b.timer"}}, map[uint32]bool{3: true}, []uint32{1}},
		{"an ended job's id does not hide another", []queuedJob{{4, "a.timer"}}, map[uint32]bool{1: true}, []uint32{4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pendingJobs(tc.listed, units, tc.ended)
			if len(got) != len(tc.want) {
				t.Fatalf("pending %v, want %v", got, tc.want)
			}
			for _, id := range tc.want {
				if !got[id] {
					t.Fatalf("pending %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// removedSignal is systemd's JobRemoved as godbus decodes it.
func removedSignal(id uint32, unit string) *dbus.Signal {
	return &dbus.Signal{
		Name: jobRemoved,
		Path: "/org/freedesktop/systemd1",
		Body: []any{id, dbus.ObjectPath("/org/freedesktop/systemd1/job/" + strconv.Itoa(int(id))), unit, "done"},
	}
}

// TestJobWaitEndsOnSignals: a wait for start jobs ends when the JobRemoved
// of each listed job of its units has arrived through the connection's
// signal handler, counting one that arrived before the listing, ignoring
// other units' and other shapes; without them it returns at the recheck
// so that the caller lists again.
func TestJobWaitEndsOnSignals(t *testing.T) {
	var w jobWatch
	h := newJobSignals(&w)
	deliver := func(s *dbus.Signal) { h.DeliverSignal("org.freedesktop.systemd1.Manager", "JobRemoved", s) }
	jw := w.watch([]string{"a.timer", "b.timer", "c.timer"})
	defer w.stop(jw)

	deliver(removedSignal(5, "a.timer")) // ended before the listing
	if left := jw.listed([]queuedJob{{5, "a.timer"}, {6, "b.timer"}, {7, "c.timer"}, {8, "x.timer"}}); left != 2 {
		t.Fatalf("waiting for %d jobs, want 2 (6, 7)", left)
	}
	if done, err := jw.until(context.Background(), 20*time.Millisecond); done || err != nil {
		t.Fatalf("no signal yet: until = %v, %v; want the recheck", done, err)
	}

	result := make(chan bool, 1)
	go func() {
		done, _ := jw.until(context.Background(), time.Minute)
		result <- done
	}()
	deliver(removedSignal(8, "x.timer"))                                 // not ours
	deliver(&dbus.Signal{Name: jobRemoved, Body: []any{"6", "b.timer"}}) // not JobRemoved's shape
	deliver(removedSignal(6, "b.timer"))
	select {
	case <-result:
		t.Fatal("ended with job 7 still queued")
	case <-time.After(50 * time.Millisecond):
	}
	deliver(removedSignal(7, "c.timer"))
	select {
	case done := <-result:
		if !done {
			t.Fatal("until reports not done")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not end on the last JobRemoved")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	jw.listed([]queuedJob{{9, "a.timer"}})
	if _, err := jw.until(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("until after ctx ended: %v", err)
	}
	w.stop(jw)
	deliver(removedSignal(9, "a.timer"))
	if done, _ := jw.until(context.Background(), 10*time.Millisecond); done {
		t.Fatal("a stopped waiter still counted a signal")
	}
}

// TestJobNewIsNotAnEnd: JobNew has JobRemoved's body; counting it as an
// end would end a wait as its jobs are queued.
func TestJobNewIsNotAnEnd(t *testing.T) {
	var w jobWatch
	h := newJobSignals(&w)
	jw := w.watch([]string{"a.timer"})
	defer w.stop(jw)
	jobNew := &dbus.Signal{Name: "org.freedesktop.systemd1.Manager.JobNew", Body: []any{uint32(3), dbus.ObjectPath("/org/freedesktop/systemd1/job/3"), "a.timer"}}
	h.DeliverSignal("org.freedesktop.systemd1.Manager", "JobNew", jobNew)
	w.removed(jobNew)
	jw.listed([]queuedJob{{3, "a.timer"}})
	if done, _ := jw.until(context.Background(), 10*time.Millisecond); done {
		t.Fatal("JobNew counted as the job's end")
	}
}

// fakeJobQueue is systemd's job queue as waitListed sees it: a listing,
// and a JobRemoved for each job that ends (deliver, nil for none).
type fakeJobQueue struct {
	mu      sync.Mutex
	queued  map[uint32]string
	lists   int
	deliver func(*dbus.Signal)
	// duringList runs after the listing's snapshot, before it returns: a
	// signal read before the caller sees the reply.
	duringList func()
}

func (q *fakeJobQueue) list(context.Context) ([]queuedJob, error) {
	q.mu.Lock()
	var jobs []queuedJob
	for id, unit := range q.queued {
		jobs = append(jobs, queuedJob{id, unit})
	}
	q.lists++
	hook := q.duringList
	q.duringList = nil
	q.mu.Unlock()
	if hook != nil {
		hook()
	}
	return jobs, nil
}

func (q *fakeJobQueue) end(id uint32) {
	q.mu.Lock()
	unit := q.queued[id]
	delete(q.queued, id)
	q.mu.Unlock()
	if q.deliver != nil {
		q.deliver(removedSignal(id, unit))
	}
}

func (q *fakeJobQueue) listings() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.lists
}

// waitInBackground runs waitListed for units and returns its result's
// channel.
func waitInBackground(w *jobWatch, q *fakeJobQueue, units []string, recheck time.Duration) chan error {
	jw := w.watch(units)
	res := make(chan error, 1)
	go func() {
		defer w.stop(jw)
		res <- jw.waitListed(context.Background(), q.list, recheck)
	}()
	return res
}

func stillWaiting(t *testing.T, res chan error, why string) {
	t.Helper()
	select {
	case err := <-res:
		t.Fatalf("wait ended (%v) %s", err, why)
	case <-time.After(100 * time.Millisecond):
	}
}

func ended(t *testing.T, res chan error) {
	t.Helper()
	select {
	case err := <-res:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not end")
	}
}

// TestWaitListedCountsJobsDown: one listing, then the wait ends on the
// last of its units' JobRemoved, whatever other units have queued.
func TestWaitListedCountsJobsDown(t *testing.T) {
	var w jobWatch
	h := newJobSignals(&w)
	q := &fakeJobQueue{queued: map[uint32]string{1: "a.timer", 2: "b.timer", 3: "x.timer"}}
	q.deliver = func(s *dbus.Signal) { h.DeliverSignal("org.freedesktop.systemd1.Manager", "JobRemoved", s) }
	res := waitInBackground(&w, q, []string{"a.timer", "b.timer"}, time.Minute)
	stillWaiting(t, res, "with both jobs queued")
	q.end(1)
	stillWaiting(t, res, "with job 2 queued")
	q.end(2)
	ended(t, res)
	if n := q.listings(); n != 1 {
		t.Fatalf("%d listings, want 1: the signals ended the wait", n)
	}
}

// TestWaitListedListsAgainWithoutSignals: with no signal at all (the
// system bus, unsubscribed), the wait lists again every recheck and ends
// at the first listing without its units' jobs, not before.
func TestWaitListedListsAgainWithoutSignals(t *testing.T) {
	var w jobWatch
	q := &fakeJobQueue{queued: map[uint32]string{1: "a.timer", 2: "b.timer"}}
	res := waitInBackground(&w, q, []string{"a.timer", "b.timer"}, 10*time.Millisecond)
	stillWaiting(t, res, "at a recheck with the jobs queued")
	q.end(1)
	stillWaiting(t, res, "at a recheck with job 2 queued")
	q.end(2)
	ended(t, res)
	if n := q.listings(); n < 3 {
		t.Fatalf("%d listings: the wait did not list again", n)
	}
}

// TestWaitListedCountsASignalReadWithTheListing: a job that ends as the
// listing is read (its JobRemoved delivered before the caller has the
// reply) is counted, not waited for until the next recheck.
func TestWaitListedCountsASignalReadWithTheListing(t *testing.T) {
	var w jobWatch
	h := newJobSignals(&w)
	q := &fakeJobQueue{queued: map[uint32]string{1: "a.timer", 2: "b.timer"}}
	q.deliver = func(s *dbus.Signal) { h.DeliverSignal("org.freedesktop.systemd1.Manager", "JobRemoved", s) }
	q.duringList = func() { q.end(1) }
	res := waitInBackground(&w, q, []string{"a.timer", "b.timer"}, time.Minute)
	stillWaiting(t, res, "with job 2 queued")
	q.end(2)
	ended(t, res)
}
