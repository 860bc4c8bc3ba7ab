package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/hostcron/hostcron/internal/wire"
)

// lockedBuffer is the runner's stdout in tests: written by the output
// copy, read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func withOutput(env Env, limits OutputLimits) (Env, *lockedBuffer) {
	out := &lockedBuffer{}
	env.Output, env.OutputLimits = out, limits
	return env, out
}

// commandLines is what the output holds but the runner's notices.
func commandLines(out string) (kept string, notices []string) {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, outputNoticePrefix) {
			notices = append(notices, l)
			continue
		}
		b.WriteString(l)
	}
	return b.String(), notices
}

// TestOutputKeepsOrderAndTail: stdout and stderr lines reach the journal
// and the record's tail in the order the command wrote them.
func TestOutputKeepsOrderAndTail(t *testing.T) {
	env, _ := setup(t, `echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf 'no newline'; exit 3`)
	env, out := withOutput(env, DefaultOutputLimits)
	if code := Run(env); code != 3 {
		t.Fatalf("exit %d, want 3", code)
	}
	const want = "out1\nerr1\nout2\nerr2\nno newline"
	if got := out.String(); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	r := record(t, env)
	if r.OutputTail == nil || *r.OutputTail != want || r.OutputTruncated || r.OutputDroppedBytes != 0 {
		t.Errorf("record tail %v truncated %v dropped %d, want %q whole", r.OutputTail, r.OutputTruncated, r.OutputDroppedBytes, want)
	}
}

// TestOutputTailIsTheLastLines: of a long output the record keeps the
// last 4 KiB from a line's start, ending with the error the command
// printed last; the journal got all of it.
func TestOutputTailIsTheLastLines(t *testing.T) {
	env, _ := setup(t, `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; echo "fatal: boom" >&2; exit 1`)
	env, out := withOutput(env, DefaultOutputLimits)
	if code := Run(env); code != 1 {
		t.Fatalf("exit %d", code)
	}
	r := record(t, env)
	if r.OutputTail == nil {
		t.Fatal("no tail recorded")
	}
	tail := *r.OutputTail
	if !strings.HasSuffix(tail, "line 1999\nfatal: boom\n") || !strings.HasPrefix(tail, "line ") ||
		len(tail) > wire.MaxOutputTail || len(tail) < wire.MaxOutputTail-20 {
		t.Errorf("tail of %d bytes: %.30q … %q", len(tail), tail, tail[max(len(tail)-30, 0):])
	}
	if !strings.HasSuffix(out.String(), tail) || !strings.HasPrefix(out.String(), "line 0\n") || r.OutputTruncated {
		t.Errorf("journal copy of %d bytes does not hold the whole output (truncated %v)", len(out.String()), r.OutputTruncated)
	}
}

// TestBackgroundChildDoesNotHoldTheRun: a child that keeps the output
// pipe open after the command ended does not keep the runner: it stops
// reading after the drain time, and the record says the output was cut.
func TestBackgroundChildDoesNotHoldTheRun(t *testing.T) {
	env, locks := setup(t, `echo $$ > pgid; (sleep 20; echo late) & echo main done`)
	limits := DefaultOutputLimits
	limits.Drain = 200 * time.Millisecond
	env, out := withOutput(env, limits)
	t.Cleanup(func() { // the background sleep, in the command's group
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "pgid"))
		if pgid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pgid > 1 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	start := time.Now()
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the runner took %v: it waited for the background child", took)
	}
	r := record(t, env)
	if r.OutputTail == nil || *r.OutputTail != "main done\n" || !r.OutputTruncated {
		t.Errorf("record tail %v truncated %v, want %q and truncated", r.OutputTail, r.OutputTruncated, "main done\n")
	}
	if _, notices := commandLines(out.String()); len(notices) != 1 || !strings.Contains(notices[0], "stopped reading") {
		t.Errorf("notices %q, want one saying the runner stopped reading", notices)
	}
}

// TestOutputRateBound: a command writing far over the rate is not slowed
// down: what is over the bucket is dropped, counted, and said once the
// output ends; the tail still holds the last lines.
func TestOutputRateBound(t *testing.T) {
	env, _ := setup(t, `yes 123456789 | head -n 20000; echo done`)
	env, out := withOutput(env, OutputLimits{Rate: 1000, Burst: maxLine, Total: 1 << 30, Drain: time.Second})
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d", code)
	}
	r := record(t, env)
	kept, notices := commandLines(out.String())
	const written = 20000*10 + len("done\n")
	if r.OutputDroppedBytes <= 0 || !r.OutputTruncated || int64(len(kept))+r.OutputDroppedBytes != int64(written) {
		t.Errorf("journal got %d bytes, record dropped %d (truncated %v): want a cut adding up to %d", len(kept), r.OutputDroppedBytes, r.OutputTruncated, written)
	}
	if len(notices) == 0 || !strings.Contains(strings.Join(notices, ""), "over 1000 bytes/s") {
		t.Errorf("notices %q, want one naming the rate", notices)
	}
	if r.OutputTail == nil || !strings.HasSuffix(*r.OutputTail, "123456789\ndone\n") {
		t.Errorf("tail %v, want the last lines even though the journal lost them", r.OutputTail)
	}
}

// TestOutputTotalBound: past the total, nothing more reaches the journal,
// one line says so, and the command still runs to its end.
func TestOutputTotalBound(t *testing.T) {
	env, _ := setup(t, `yes 123456789 | head -n 20000; echo "the end"; exit 4`)
	env, out := withOutput(env, OutputLimits{Rate: rate.Inf, Burst: maxLine, Total: 50000, Drain: time.Second})
	if code := Run(env); code != 4 {
		t.Fatalf("exit %d, want the command's 4", code)
	}
	r := record(t, env)
	kept, notices := commandLines(out.String())
	const written = 20000*10 + len("the end\n")
	if len(kept) != 50000 || r.OutputDroppedBytes != int64(written-50000) || !r.OutputTruncated {
		t.Errorf("journal got %d bytes, record dropped %d: want 50000 and %d", len(kept), r.OutputDroppedBytes, written-50000)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "reached 50000 bytes") {
		t.Errorf("notices %q, want one saying the total was reached", notices)
	}
	if r.OutputTail == nil || !strings.HasSuffix(*r.OutputTail, "123456789\nthe end\n") {
		t.Errorf("tail %v, want the command's last line", r.OutputTail)
	}
}

// TestTermReachesCommandWithOutput: SIGTERM is still forwarded to the
// command's group (its trap runs, its background child dies with it, so
// the pipe ends), and what the trap printed is in the tail.
func TestTermReachesCommandWithOutput(t *testing.T) {
	env, _ := setup(t, `trap 'echo got TERM; exit 5' TERM; echo waiting; sleep 30 & wait`)
	env, _ = withOutput(env, DefaultOutputLimits)
	sigtermOnceRan(env)
	start := time.Now()
	if code := Run(env); code != 5 {
		t.Fatalf("exit %d, want the trap's 5", code)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
	r := record(t, env)
	if r.OutputTail == nil || *r.OutputTail != "waiting\ngot TERM\n" || r.OutputTruncated {
		t.Errorf("tail %v truncated %v, want the trap's line, whole", r.OutputTail, r.OutputTruncated)
	}
}

func TestTailRing(t *testing.T) {
	r := tailRing{size: 8}
	for _, s := range []string{"ab", "cdefgh", "ij", "klmnopqrstu", "\nvw"} {
		r.Write([]byte(s))
	}
	// The last 8 bytes are "qrstu\nvw", cut mid-line: the tail starts at the next line.
	if got := r.String(); got != "vw" {
		t.Errorf("tail %q, want %q", got, "vw")
	}
	r = tailRing{size: 8}
	r.Write([]byte("abc\n"))
	if got := r.String(); got != "abc\n" {
		t.Errorf("tail %q, want the whole short output", got)
	}
}

// TestOutputRateNotices: drops over the rate are said when output passes
// again, at most once a second, and what is left at the end; the counts
// add up.
func TestOutputRateNotices(t *testing.T) {
	var out bytes.Buffer
	c := newOutputCopy(&out, OutputLimits{Rate: 1000, Total: 1 << 30, Drain: time.Second})
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	clock := t0
	c.now = func() time.Time { return clock }
	line := []byte(strings.Repeat("x", 999) + "\n")
	feed := func(at time.Duration, n int) {
		clock = t0.Add(at)
		for range n {
			c.write(c.take(line))
		}
	}
	feed(0, 17)                    // the burst (maxLine bytes) takes 16 lines
	feed(500*time.Millisecond, 1)  // 884 tokens: dropped
	feed(2*time.Second, 3)         // a notice of 2000 bytes, two lines, one dropped
	feed(2900*time.Millisecond, 1) // passes; its notice waits: the last one was 0.9 s ago
	c.write(c.endNotice())
	kept, notices := commandLines(out.String())
	want := []string{
		outputNoticePrefix + "2000 bytes of output dropped: over 1000 bytes/s\n",
		outputNoticePrefix + "1000 bytes of output dropped: over 1000 bytes/s\n",
	}
	if strings.Join(notices, "") != strings.Join(want, "") {
		t.Errorf("notices %q, want %q", notices, want)
	}
	if len(kept) != 19*1000 || c.dropped != 3*1000 {
		t.Errorf("passed %d bytes, dropped %d: want 19000 and 3000", len(kept), c.dropped)
	}
}
