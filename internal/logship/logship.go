// Package logship ships cron jobs' journald output to Loki with the labels
// tenants query by. It follows the journal with journalctl (a static agent
// cannot link libsystemd), keeps only entries whose trusted _SYSTEMD_UNIT
// (set by journald, not by the logging process) is a cron unit, names the
// tenant and job from that unit's name, and pushes them in batches. The
// HOSTCRON_* fields are ignored: any process can log them, so a tenant
// could write into another tenant's logs with them. The journal cursor is saved only after Loki
// accepted a batch, so a restart resumes where it stopped: nothing is lost,
// and a batch pushed twice (a crash between push and save) carries the same
// timestamps and lines, which Loki stores once. While Loki is down the
// shipper stops reading; the journal on disk is the buffer, so memory
// stays bounded by one batch.
package logship

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// Config configures a shipper.
type Config struct {
	Loki       *Client
	Node       string        // the node label
	CursorFile string        // where the journal position is kept
	BatchSize  int           // lines per push (default 500)
	BatchWait  time.Duration // longest a line waits for its batch (default 1s)
	Journalctl string        // path of journalctl (default "journalctl")
	Log        *slog.Logger
	// Shipped is told of each batch Loki accepted: when its oldest line
	// was written, and now (the agent's lag metric); nil: nobody.
	Shipped func(oldest, now time.Time)
}

// Entry is one cron log line.
type Entry struct {
	Time   time.Time
	Tenant string
	JobID  string
	Line   string
	// Invocation is journald's trusted _SYSTEMD_INVOCATION_ID: the
	// activation, so the run, the line belongs to.
	Invocation string
	cursor     string
}

// Run ships until ctx ends. It restarts journalctl if it exits.
func Run(ctx context.Context, cfg Config) error {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.BatchWait <= 0 {
		cfg.BatchWait = time.Second
	}
	if cfg.Journalctl == "" {
		cfg.Journalctl = "journalctl"
	}
	for ctx.Err() == nil {
		if err := follow(ctx, cfg); err != nil && ctx.Err() == nil {
			cfg.Log.Warn("journal follow ended, restarting", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// follow runs one journalctl and ships what it prints.
func follow(ctx context.Context, cfg Config) error {
	args := []string{"--follow", "--output=json", "--no-pager", "--no-tail", "--all"}
	if cur := readCursor(cfg.CursorFile); cur != "" {
		args = append(args, "--after-cursor="+cur)
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(jctx, cfg.Journalctl, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("journalctl: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start journalctl: %w", err)
	}
	defer cmd.Wait() //nolint:errcheck // killed by cancel
	lines := make(chan Entry)
	readErr := make(chan error, 1)
	go func() { readErr <- scan(out, lines) }()
	var batch []Entry
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-lines:
			if !ok {
				_ = ship(ctx, cfg, batch)
				return <-readErr
			}
			if len(batch) == 0 {
				timer.Reset(cfg.BatchWait)
			}
			batch = append(batch, e)
			if len(batch) < cfg.BatchSize {
				continue
			}
		case <-timer.C:
		}
		if err := ship(ctx, cfg, batch); err != nil {
			return err
		}
		batch = batch[:0]
	}
}

// Retry bounds of a push Loki may take later.
const (
	pushBackoffBase = 500 * time.Millisecond
	pushBackoffCap  = 30 * time.Second
)

// ship pushes a batch, retrying with capped backoff while Loki is down or
// throttling (5xx, 429, network), then saves the cursor of its last entry.
// A batch Loki refuses for good (another 4xx: too old, too large, invalid)
// is dropped, logged and counted, and the cursor moves past it: retrying
// would block every later line behind it forever.
func ship(ctx context.Context, cfg Config, batch []Entry) error {
	if len(batch) == 0 {
		return nil
	}
	backoff := pushBackoffBase
	for {
		err := cfg.Loki.Push(ctx, cfg.Node, batch)
		if err == nil {
			if cfg.Shipped != nil {
				cfg.Shipped(oldestEntry(batch), time.Now())
			}
			break
		}
		if !retryable(err) {
			droppedBatches.Add(1)
			droppedLines.Add(int64(len(batch)))
			cfg.Log.Error("loki refused a batch, dropped", "lines", len(batch), "err", err,
				"dropped_batches_total", droppedBatches.Load())
			break
		}
		cfg.Log.Warn("loki push failed, retrying", "lines", len(batch), "retry_in", backoff.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, pushBackoffCap)
	}
	return writeCursor(cfg.CursorFile, batch[len(batch)-1].cursor)
}

// oldestEntry is the earliest journal time of a batch (the journal's order
// is by time, but a batch may hold entries of several boots' clocks).
func oldestEntry(batch []Entry) time.Time {
	var t time.Time
	for _, e := range batch {
		if t.IsZero() || (!e.Time.IsZero() && e.Time.Before(t)) {
			t = e.Time
		}
	}
	return t
}

// retryable: only Loki's own trouble (5xx), throttling (429) and network
// errors are worth retrying.
func retryable(err error) bool {
	var pe *PushError
	if errors.As(err, &pe) {
		return pe.Status == http.StatusTooManyRequests || pe.Status >= 500
	}
	return true
}

// Counters of what the shipper gave up on, for the agent's logs and tests.
var (
	droppedBatches, droppedLines, truncatedLines atomic.Int64
	// skippedEntries counts journal entries too large to read.
	skippedEntries atomic.Int64
)

// Dropped reports batches and lines Loki refused for good, and lines
// truncated to MaxLineBytes, since the process started.
func Dropped() (batches, lines, truncated int64) {
	return droppedBatches.Load(), droppedLines.Load(), truncatedLines.Load()
}

// MaxLineBytes bounds one shipped line; a longer one is cut, with a
// marker, so one huge line cannot get a whole batch refused.
const MaxLineBytes = 16 << 10

// TruncatedMarker ends a cut line.
const TruncatedMarker = " …[truncated]"

// truncate cuts line to at most MaxLineBytes, at a rune boundary.
func truncate(line string) (string, bool) {
	if len(line) <= MaxLineBytes {
		return line, false
	}
	cut := MaxLineBytes - len(TruncatedMarker)
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + TruncatedMarker, true
}

// maxEntryJSON bounds one journal entry as journalctl prints it; a longer
// one is skipped (and counted), never kept in memory.
const maxEntryJSON = 4 << 20

// scan decodes journalctl's JSON lines into entries of cron units. Any
// local process can log an entry larger than maxEntryJSON: it is skipped,
// since ending the scan would restart journalctl at the same cursor and
// stop shipping for every tenant of the node.
func scan(r interface{ Read([]byte) (int, error) }, out chan<- Entry) error {
	defer close(out)
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case tooLong:
		case len(line)+len(chunk) > maxEntryJSON:
			tooLong, line = true, line[:0]
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !tooLong && len(line) > 0 {
			if e, ok := decodeEntry(line); ok {
				out <- e
			}
		} else if tooLong {
			skippedEntries.Add(1)
		}
		line, tooLong = line[:0], false
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// decodeEntry turns one journal entry into a cron log line, or ok=false
// for an entry that is not a cron unit's.
func decodeEntry(b []byte) (Entry, bool) {
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		return Entry{}, false
	}
	unit, _ := f["_SYSTEMD_UNIT"].(string)
	tenant, job, ok := ParseUnit(unit)
	if !ok {
		return Entry{}, false
	}
	us, _ := strconv.ParseInt(fmt.Sprint(f["__REALTIME_TIMESTAMP"]), 10, 64)
	cursor, _ := f["__CURSOR"].(string)
	line, cut := truncate(message(f["MESSAGE"]))
	if cut {
		truncatedLines.Add(1)
	}
	inv, _ := f["_SYSTEMD_INVOCATION_ID"].(string)
	if !wire.ValidInvocationID(inv) {
		inv = ""
	}
	return Entry{Time: time.UnixMicro(us), Tenant: tenant, JobID: job, Line: line, Invocation: inv, cursor: cursor}, true
}

// ParseUnit splits cron-{tenant}-{id}.service into tenant and job id, by
// the rules unit names are made with (the id is a UUID, so the tenant is
// everything between the prefix and the last 37 bytes).
func ParseUnit(unit string) (tenant, id string, ok bool) {
	name, found := strings.CutSuffix(unit, ".service")
	if !found {
		return "", "", false
	}
	tenant, id, found = wire.SplitUnitName(name)
	if !found {
		return "", "", false
	}
	if !units.ValidTenant(tenant) || !wire.ValidID(id) || units.Name(tenant, id)+".service" != unit {
		return "", "", false
	}
	return tenant, id, true
}

// message decodes MESSAGE, which journald gives as an array of bytes when
// it is not valid UTF-8.
func message(v any) string {
	switch m := v.(type) {
	case string:
		return m
	case []any:
		b := make([]byte, 0, len(m))
		for _, x := range m {
			if n, ok := x.(float64); ok {
				b = append(b, byte(n))
			}
		}
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return ""
}

func readCursor(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func writeCursor(path, cursor string) error {
	if cursor == "" {
		return errors.New("journal entry without cursor")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save journal cursor: %w", err)
	}
	if err := atomicfile.Write(path, []byte(cursor+"\n"), 0o600); err != nil {
		return fmt.Errorf("save journal cursor: %w", err)
	}
	return nil
}
