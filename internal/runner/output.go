package runner

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

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

// outputCopy copies a command's output (see the comment at the top).
type outputCopy struct {
	out    io.Writer
	limits OutputLimits
	bucket *rate.Limiter
	now    func() time.Time
	done   chan struct{}

	mu          sync.Mutex // the fields below; out is written outside it
	tail        tailRing
	passed      int64 // bytes put into the journal
	dropped     int64 // bytes dropped, in all
	pending     int64 // bytes dropped for the rate since the last notice
	lastNotice  time.Time
	full        bool // Total reached: nothing more passes
	unread      bool // the runner stopped reading before the pipe's end
	midLine     bool // the last piece passed did not end its line
	fullNoticed bool
}

func newOutputCopy(out io.Writer, limits OutputLimits) *outputCopy {
	return &outputCopy{
		out: out, limits: limits, now: time.Now, done: make(chan struct{}),
		bucket: rate.NewLimiter(limits.Rate, max(limits.Burst, maxLine)),
		tail:   tailRing{size: wire.MaxOutputTail},
	}
}

// copyFrom reads r to its end (or a read error, such as the deadline
// stop sets) and closes done.
func (c *outputCopy) copyFrom(r io.Reader) {
	defer close(c.done)
	br := bufio.NewReaderSize(r, maxLine)
	for {
		piece, err := br.ReadSlice('\n')
		if len(piece) > 0 {
			c.write(c.take(piece))
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.unread = !errors.Is(err, io.EOF)
			c.mu.Unlock()
			c.write(c.endNotice())
			return
		}
	}
}

// take decides what of one piece of output goes on: the piece, perhaps
// after a notice of what was dropped before it, or nothing. The tail
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
	var out []byte
	if c.pending > 0 && c.now().Sub(c.lastNotice) >= noticeEvery {
		out = c.rateNotice()
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
	if c.pending > 0 {
		out = c.rateNotice()
	}
	if c.unread {
		out = append(out, c.notice(fmt.Sprintf("stopped reading the output %s after the command ended (a background process kept it open): the rest is not in the journal", c.limits.Drain))...)
	}
	return out
}

func (c *outputCopy) rateNotice() []byte {
	msg := fmt.Sprintf("%d bytes of output dropped: over %d bytes/s", c.pending, int64(c.limits.Rate))
	c.pending, c.lastNotice = 0, c.now()
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

// stop waits up to Drain for the output to end after the command was
// reaped, then stops reading (the read deadline wakes the reader), and
// returns what the record keeps. A reader stuck writing to a journal that
// does not take it is left behind: the record does not wait for it.
func (c *outputCopy) stop(pipe *os.File) (tail string, truncated bool, droppedBytes int64) {
	select {
	case <-c.done:
	case <-time.After(c.limits.Drain):
		_ = pipe.SetReadDeadline(time.Now())
		select {
		case <-c.done:
		case <-time.After(c.limits.Drain):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	unfinished := false
	select {
	case <-c.done:
	default:
		unfinished = true
	}
	return c.tail.String(), c.dropped > 0 || c.unread || unfinished, c.dropped
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
