package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/hostcron/hostcron/internal/wire"
)

// The command's stdout and stderr are one pipe, read by the runner, which
// copies it line by line to its own stdout (the unit's journal stream, so
// the journal fields, Loki shipping and the logs API's run= filter are as
// before), keeps the end of it for the run record (OutputTail), and
// bounds what one run may put into the journal (OutputLimits).

// OutputLimits bound what one run may write to the journal. Past a bound
// the runner reads on and drops (the command is never blocked on a full
// pipe for it), and a line of its own says what was dropped.
type OutputLimits struct {
	// Rate and Burst: a token bucket of bytes; a line passes whole or not
	// at all. Burst is at least maxLine, so every line can pass.
	Rate  rate.Limit
	Burst int
	// Total is the most one run puts into the journal.
	Total int64
	// Drain is how long the runner reads on after the command was reaped:
	// a background child that inherited the pipe may hold it open for
	// ever, and the run must end anyway.
	Drain time.Duration
}

// DefaultOutputLimits: a chatty job (a progress line a second, a stack
// trace of a few hundred KiB) passes whole; a loop printing as fast as it
// can is cut after a second's burst to 64 KiB/s, and no run puts more
// than 16 MiB into the journal and Loki. journald's own per-unit rate
// limit (RateLimitBurst=, lines per interval) still applies behind it.
var DefaultOutputLimits = OutputLimits{Rate: 64 << 10, Burst: 1 << 20, Total: 16 << 20, Drain: time.Second}

// maxLine is the longest piece passed on at once: a longer line goes on
// in pieces of this size (journald splits at its LineMax= anyway).
const maxLine = 16 << 10

// outputNoticePrefix starts every line the runner adds to the output.
const outputNoticePrefix = "hostcron: "

// noticeEvery spaces the runner's notices of rate drops: a command
// writing steadily over the rate would otherwise get one after every line
// that passes.
const noticeEvery = time.Second

// journalQueue bounds the output waiting for the journal (a burst's
// worth). The reader never waits on the journal: a journald that stalls
// (I/O pressure) must not keep the command's last words from the tail,
// nor make the drain after the command look like a pipe held open. What
// does not fit is dropped, counted and said.
const journalQueue = 1 << 20

// finalDrain bounds what the runner reads, without waiting, once it stops
// waiting for the pipe's end: the pipe's content (64 KiB by default, at
// most 1 MiB), not a background process writing as fast as it can.
const finalDrain = 1 << 20

// errHeldOpen: the pipe had nothing more to read, but no end either.
var errHeldOpen = errors.New("output pipe held open")

// outputCopy copies a command's output (see the comment at the top).
type outputCopy struct {
	out     io.Writer
	limits  OutputLimits
	bucket  *rate.Limiter
	now     func() time.Time
	done    chan struct{} // the reader ended
	wake    chan struct{} // the journal writer has something to do
	flushed chan struct{} // the journal writer ended

	mu          sync.Mutex // the fields below; out is written outside it
	tail        tailRing
	passed      int64    // bytes put into the journal
	dropped     int64    // bytes dropped, in all
	pending     int64    // bytes dropped for the rate since the last notice
	slow        int64    // bytes dropped for a full journal queue, not said yet
	queue       [][]byte // for the journal writer
	queued      int      // the queue's cost (queueCost)
	closed      bool     // nothing more comes into the queue
	final       []byte   // the end notice, written after the queue
	lastNotice  time.Time
	full        bool // Total reached: nothing more passes
	unread      bool // the runner stopped reading before the pipe's end
	midLine     bool // the last piece passed did not end its line
	fullNoticed bool
}

func newOutputCopy(out io.Writer, limits OutputLimits) *outputCopy {
	return &outputCopy{
		out: out, limits: limits, now: time.Now, done: make(chan struct{}),
		wake: make(chan struct{}, 1), flushed: make(chan struct{}),
		bucket: rate.NewLimiter(limits.Rate, max(limits.Burst, maxLine)),
		tail:   tailRing{size: wire.MaxOutputTail},
	}
}

// copyFrom reads pipe to its end (or until stop gives up on it), closes
// done, and has a goroutine of its own write to the journal.
func (c *outputCopy) copyFrom(pipe *os.File) {
	defer close(c.done)
	go c.writeJournal()
	br := bufio.NewReaderSize(&drainingReader{f: pipe, left: finalDrain}, maxLine)
	for {
		piece, err := br.ReadSlice('\n')
		if len(piece) > 0 {
			c.send(c.take(piece))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.unread = !errors.Is(err, io.EOF)
			c.mu.Unlock()
			end := c.endNotice()
			c.mu.Lock()
			c.final, c.closed = end, true // written whatever room the queue has left
			c.mu.Unlock()
			c.signal()
			return
		}
	}
}

// writeJournal writes the queue, then the end notice, to the journal.
func (c *outputCopy) writeJournal() {
	defer close(c.flushed)
	for {
		c.mu.Lock()
		batch, closed, final := c.queue, c.closed, c.final
		c.queue = nil
		c.mu.Unlock()
		if len(batch) == 0 {
			if closed {
				c.write(final)
				return
			}
			<-c.wake
			continue
		}
		for _, b := range batch {
			c.write(b)
			c.mu.Lock()
			c.queued -= queueCost(b)
			c.mu.Unlock()
		}
	}
}

// queueCost is what b takes in the queue: a line of one byte costs its
// slice too.
func queueCost(b []byte) int { return len(b) + 32 }

// signal wakes the journal writer (the channel holds one wake-up).
func (c *outputCopy) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// noticeRoom is kept in the queue for the notices before a piece (take),
// so that a piece that fits never loses them.
const noticeRoom = 512

// send queues b for the journal; take made sure it has room.
func (c *outputCopy) send(b []byte) {
	if len(b) == 0 {
		return
	}
	c.mu.Lock()
	c.queue = append(c.queue, b)
	c.queued += queueCost(b)
	c.mu.Unlock()
	c.signal()
}

// take decides what of one piece of output goes on: the piece, perhaps
// after a notice of what was dropped before it, or nothing. A piece the
// journal queue has no room for is dropped, counted and said. The tail
// keeps every piece, dropped or not: it is the command's last words.
func (c *outputCopy) take(piece []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tail.Write(piece)
	n := len(piece)
	if !c.full && c.passed+int64(n) > c.limits.Total {
		c.full = true
	}
	if c.full || !c.bucket.AllowN(c.now(), n) {
		c.dropped += int64(n)
		if c.full && !c.fullNoticed {
			c.fullNoticed = true
			return c.notice(fmt.Sprintf("this run's output reached %d bytes in the journal: the rest is dropped (the run record says how much)", c.limits.Total))
		}
		if !c.full {
			c.pending += int64(n)
		}
		return nil
	}
	if c.queued+queueCost(piece)+noticeRoom > journalQueue {
		c.dropped += int64(n)
		c.slow += int64(n)
		return nil
	}
	var out []byte
	if c.slow > 0 {
		out = c.slowNotice()
	}
	if c.pending > 0 && c.now().Sub(c.lastNotice) >= noticeEvery {
		out = append(out, c.rateNotice()...)
	}
	c.passed += int64(n)
	c.midLine = piece[n-1] != '\n'
	return append(out, piece...)
}

// endNotice is what is left to say once the output ended.
func (c *outputCopy) endNotice() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []byte
	if c.slow > 0 {
		out = c.slowNotice()
	}
	if c.pending > 0 {
		out = append(out, c.rateNotice()...)
	}
	if c.unread {
		out = append(out, c.notice("stopped reading the output after the command ended: a background process kept it open; the rest is not in the journal")...)
	}
	return out
}

func (c *outputCopy) rateNotice() []byte {
	msg := fmt.Sprintf("%d bytes of output dropped: over %d bytes/s", c.pending, int64(c.limits.Rate))
	c.pending, c.lastNotice = 0, c.now()
	return c.notice(msg)
}

func (c *outputCopy) slowNotice() []byte {
	msg := fmt.Sprintf("%d bytes of output dropped: the journal did not take them in time", c.slow)
	c.slow = 0
	return c.notice(msg)
}

// notice is a line of the runner's own, on a line of its own.
func (c *outputCopy) notice(msg string) []byte {
	var b []byte
	if c.midLine {
		b = append(b, '\n')
		c.midLine = false
	}
	return append(append(b, outputNoticePrefix+msg...), '\n')
}

func (c *outputCopy) write(b []byte) {
	if len(b) > 0 {
		_, _ = c.out.Write(b) // a journal that cannot take it loses it, as before
	}
}

// stop waits for the output to end after the command was reaped, for
// Drain but never past what bound makes of a time (drainBound: the
// runner must exit before the unit's start timeout), then reads what the
// pipe still holds without waiting and stops. It waits for the journal's
// copy within the same bounds, and returns what the record keeps.
func (c *outputCopy) stop(pipe *os.File, bound func(time.Time) time.Time) (tail string, truncated bool, droppedBytes int64) {
	if !waitUntil(c.done, bound(time.Now().Add(c.limits.Drain))) {
		// The deadline wakes a read that waits, and the reader goes on
		// without waiting (drainingReader): it ends at once. It is given
		// drainFloor to copy what the pipe holds even when the bound has
		// passed (a command that ended within timeoutMargin of the unit's
		// timeout): otherwise its last bytes, already in the pipe, were
		// cut from the tail. It never waits on the journal (the queue
		// drops what a stalled journal has not taken), so the floor is
		// bounded by the copy alone.
		if err := pipe.SetReadDeadline(time.Now()); err == nil {
			waitUntil(c.done, later(bound(time.Now().Add(c.limits.Drain)), time.Now().Add(drainFloor)))
		}
	}
	// The journal's copy gets no floor: a stalled journald must not keep
	// the runner past the unit's timeout, which would make a command that
	// ended in time the tenant's timeout (review s20f). The tail is the
	// reader's, not the journal's.
	flushed := waitUntil(c.flushed, bound(time.Now().Add(c.limits.Drain)))
	c.mu.Lock()
	defer c.mu.Unlock()
	ended := false
	select {
	case <-c.done:
		ended = true
	default:
	}
	return c.tail.String(), c.dropped > 0 || c.unread || !ended || !flushed, c.dropped
}

// drainFloor is the least stop waits for the reader once it no longer
// waits on the pipe: a bound already passed leaves it this long (out of
// timeoutMargin) to copy what the pipe holds. A variable for tests.
var drainFloor = 200 * time.Millisecond

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitUntil waits for ch to be closed until t; false: it was not.
func waitUntil(ch <-chan struct{}, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// drainingReader reads the output pipe. Once a read deadline (stop) has
// passed it no longer waits: it reads what the pipe holds (at most left
// bytes), then reports io.EOF if the pipe really ended, else
// errHeldOpen. So the command's last bytes reach the tail even when they
// were still in the pipe when the runner gave up waiting.
type drainingReader struct {
	f        *os.File
	draining bool
	left     int
}

func (r *drainingReader) Read(p []byte) (int, error) {
	if !r.draining {
		n, err := r.f.Read(p)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		r.draining = true
		// A read with the deadline passed fails before it reads.
		if err := r.f.SetReadDeadline(time.Time{}); err != nil {
			return n, fmt.Errorf("output pipe: %w", err)
		}
		if n > 0 {
			return n, nil
		}
	}
	if r.left <= 0 {
		return 0, errHeldOpen
	}
	p = p[:min(len(p), r.left)]
	rc, err := r.f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("output pipe: %w", err)
	}
	var n int
	var rerr error
	// The pipe is non-blocking (os.Pipe): returning true reads once,
	// never waits.
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Read(int(fd), p)
			if rerr != unix.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, fmt.Errorf("output pipe: %w", err)
	case rerr == unix.EAGAIN:
		return 0, errHeldOpen
	case rerr != nil:
		return 0, fmt.Errorf("output pipe: %w", rerr)
	case n == 0:
		return 0, io.EOF
	}
	r.left -= n
	return n, nil
}

// tailRing keeps the last size bytes written to it.
type tailRing struct {
	size    int
	buf     []byte
	written int64
}

func (t *tailRing) Write(b []byte) {
	t.written += int64(len(b))
	if len(b) >= t.size {
		t.buf = append(t.buf[:0], b[len(b)-t.size:]...)
		return
	}
	t.buf = append(t.buf, b...)
	if len(t.buf) > 2*t.size { // shift now and then, not on every write
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.size:]...)
	}
}

// String is the stored tail (wire.OutputTail) of what was written.
func (t *tailRing) String() string {
	b := t.buf
	if len(b) > t.size {
		b = b[len(b)-t.size:]
	}
	return wire.OutputTail(b, t.written > int64(len(b)))
}
