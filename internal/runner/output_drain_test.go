package runner

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/hostcron/hostcron/internal/jobspec"
)

// slowJournal is a journal stream that stalls on its first write (journald
// under I/O pressure) until stall is closed, then takes everything.
type slowJournal struct {
	mu    sync.Mutex
	once  sync.Once
	stall chan struct{}
	buf   strings.Builder
}

func (s *slowJournal) Write(p []byte) (int, error) {
	s.once.Do(func() { <-s.stall })
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *slowJournal) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestSlowJournalKeepsLastWords (from the review): no background process
// holds the pipe; the command's last line is in the pipe when it exits,
// and the journal stalls for longer than the runner waits. The tail still
// has the last line (the reader does not wait on the journal), the
// journal gets it once it takes writes again, and no notice blames a
// background process.
func TestSlowJournalKeepsLastWords(t *testing.T) {
	env, _ := setup(t, `echo first; sleep 0.1; echo "fatal: the real error" >&2; exit 2`)
	j := &slowJournal{stall: make(chan struct{})}
	env.Output, env.OutputLimits = j, DefaultOutputLimits // Drain: 1 s
	code := Run(env)
	close(j.stall)
	if code != 2 {
		t.Fatalf("exit %d", code)
	}
	r := record(t, env)
	if r.OutputTail == nil || !strings.Contains(*r.OutputTail, "fatal: the real error") {
		t.Errorf("tail %q (truncated %v): the command's last line, written before it exited, is missing", derefTail(r.OutputTail), r.OutputTruncated)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(j.String(), "fatal: the real error") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if got := j.String(); !strings.Contains(got, "fatal: the real error") || strings.Contains(got, "background process") {
		t.Errorf("journal %q: want the last line and no notice of a background process", got)
	}
}

func derefTail(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestDrainBound: the runner waits on output for what it wants, but never
// within timeoutMargin of the unit's start timeout.
func TestDrainBound(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name    string
		want    time.Time
		timeout time.Duration
		bound   time.Time
	}{
		{"no timeout known (older spec)", t0.Add(time.Hour), 0, t0.Add(time.Hour)},
		{"far from the timeout", t0.Add(10 * time.Second), time.Minute, t0.Add(10 * time.Second)},
		{"exactly at the margin", t0.Add(58 * time.Second), time.Minute, t0.Add(58 * time.Second)},
		{"within the margin", t0.Add(59 * time.Second), time.Minute, t0.Add(58 * time.Second)},
		{"past the timeout", t0.Add(61 * time.Second), time.Minute, t0.Add(58 * time.Second)},
		{"timeout shorter than the margin", t0.Add(time.Second), time.Second, t0.Add(-time.Second)},
	} {
		if got := drainBound(tt.want, t0, tt.timeout); !got.Equal(tt.bound) {
			t.Errorf("%s: drainBound(%v, %v) = %v, want %v", tt.name, tt.want.Sub(t0), tt.timeout, got.Sub(t0), tt.bound.Sub(t0))
		}
	}
}

// TestHeldPipeNearTimeout: the command ends in time, a background child
// holds its output pipe, and the unit's start timeout is near. The runner
// ends (and writes its record) before the timeout, so systemd never kills
// it and the run is not a timeout; the record keeps the command's output.
func TestHeldPipeNearTimeout(t *testing.T) {
	env, locks := setup(t, `echo $$ > pgid; (sleep 20; echo late) & echo "main done"; exit 0`)
	editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = 3 })
	t.Cleanup(func() { // the background sleep, in the command's group
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "pgid"))
		if pgid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	env, out := withOutput(env, DefaultOutputLimits) // Drain: 1 s
	// The unit started 2.3 s ago: systemd's timeout is 0.7 s away, less
	// than one Drain.
	env.Started = time.Now().Add(-2300 * time.Millisecond)
	timeout := env.Started.Add(3 * time.Second)
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if now := time.Now(); !now.Before(timeout) {
		t.Fatalf("the runner ended %v after the unit's start timeout: systemd would have killed it as a timeout", now.Sub(timeout))
	}
	r := record(t, env)
	if r.ExitCode == nil || *r.ExitCode != 0 || r.OutputTail == nil || *r.OutputTail != "main done\n" || !r.OutputTruncated {
		t.Errorf("record exit %v tail %q truncated %v: want 0, %q, truncated", r.ExitCode, derefTail(r.OutputTail), r.OutputTruncated, "main done\n")
	}
	// The journal's copy may miss the notice: the runner had no time left
	// to wait for it. What it has says the right thing.
	if _, notices := commandLines(out.String()); len(notices) > 1 || len(notices) == 1 && !strings.Contains(notices[0], "background process") {
		t.Errorf("notices %q, want at most one, saying a background process kept the output open", notices)
	}
}

// TestDrainingReader: once the read deadline passed, the reader takes
// what the pipe holds without waiting, and tells a pipe that ended from
// one still held open.
func TestDrainingReader(t *testing.T) {
	for _, ended := range []bool{false, true} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString("last words\n"); err != nil {
			t.Fatal(err)
		}
		if ended {
			w.Close()
		} else {
			defer w.Close()
		}
		if err := r.SetReadDeadline(time.Now()); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(&drainingReader{f: r, left: finalDrain})
		want := errHeldOpen
		if ended {
			want = nil // io.ReadAll's EOF
		}
		if string(got) != "last words\n" || !errors.Is(err, want) {
			t.Errorf("pipe ended %v: read %q, %v; want the last words and %v", ended, got, err, want)
		}
		r.Close()
	}
}

// TestJournalQueueDropsAndSays: output the journal does not take in time
// fills the queue, not the reader; what does not fit is dropped, counted
// in the record's figures, and said once the journal takes output again.
func TestJournalQueueDropsAndSays(t *testing.T) {
	c := newOutputCopy(io.Discard, OutputLimits{Rate: rate.Inf, Total: 1 << 30, Drain: time.Second})
	line := []byte(strings.Repeat("x", 999) + "\n")
	const lines = 2 * journalQueue / 1000 // the writer is not running: nothing leaves the queue
	for range lines {
		c.send(c.take(line))
	}
	if c.queued > journalQueue+noticeRoom || c.dropped == 0 || c.dropped != c.slow || c.passed+c.dropped != lines*1000 {
		t.Fatalf("queued %d, dropped %d (unsaid %d), passed %d: want a full queue and the rest dropped", c.queued, c.dropped, c.slow, c.passed)
	}
	dropped := c.dropped
	c.queue, c.queued = nil, 0 // the journal took it
	got := string(c.take(line))
	if want := outputNoticePrefix + strconv.FormatInt(dropped, 10) + " bytes of output dropped: the journal did not take them in time\n" + string(line); got != want {
		t.Errorf("next piece %q, want %q", got, want)
	}
}

// A stalled journal never keeps the runner past the drain's bound, however
// long the reader's floor: a command that ended in time near its unit's
// timeout, whose runner then waited on journald, was killed by systemd's
// timeout and reported as the tenant's timeout (review s20f). The floor is
// set to an hour here, so a wait on the journal's copy could not be missed.
func TestStalledJournalPastTheBoundIsNotWaitedFor(t *testing.T) {
	defer func(f time.Duration) { drainFloor = f }(drainFloor)
	drainFloor = time.Hour
	env, _ := setup(t, `echo "last words"`)
	j := &slowJournal{stall: make(chan struct{})}
	defer close(j.stall)
	env.Output = j
	editSpec(t, env, func(s *jobspec.Spec) { s.TimeoutSec = 3 })
	env.Started = time.Now().Add(-2 * time.Second) // the drain's bound (timeout - 2 s) has passed
	done := make(chan int, 1)
	go func() { done <- Run(env) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner waits on a stalled journal past the drain's bound")
	}
	if r := record(t, env); r.OutputTail == nil || *r.OutputTail != "last words\n" || !r.OutputTruncated {
		t.Errorf("tail %q (truncated %v): want the command's words, marked cut (the journal did not take them)", derefTail(r.OutputTail), r.OutputTruncated)
	}
}
