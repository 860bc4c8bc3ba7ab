// Package logship ships cron jobs' journald output to Loki with the labels
// tenants query by. It follows the journal with journalctl (a static agent
// cannot link libsystemd), keeps only entries that carry the fields every
// cron unit sets (LogExtraFields=HOSTCRON_TENANT, HOSTCRON_CRON_JOB_ID), and
// pushes them in batches. The journal cursor is saved only after Loki
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
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
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
}

// Entry is one cron log line.
type Entry struct {
	Time   time.Time
	Tenant string
	JobID  string
	Line   string
	cursor string
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

// ship pushes a batch, retrying with backoff until Loki takes it, then
// saves the cursor of its last entry.
func ship(ctx context.Context, cfg Config, batch []Entry) error {
	if len(batch) == 0 {
		return nil
	}
	backoff := 500 * time.Millisecond
	for {
		err := cfg.Loki.Push(ctx, cfg.Node, batch)
		if err == nil {
			break
		}
		cfg.Log.Warn("loki push failed, retrying", "lines", len(batch), "retry_in", backoff.String(), "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
	return writeCursor(cfg.CursorFile, batch[len(batch)-1].cursor)
}

// scan decodes journalctl's JSON lines into entries of cron units.
func scan(r interface{ Read([]byte) (int, error) }, out chan<- Entry) error {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var f map[string]any
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			continue
		}
		tenant, _ := f["HOSTCRON_TENANT"].(string)
		job, _ := f["HOSTCRON_CRON_JOB_ID"].(string)
		if tenant == "" || job == "" {
			continue
		}
		us, _ := strconv.ParseInt(fmt.Sprint(f["__REALTIME_TIMESTAMP"]), 10, 64)
		cursor, _ := f["__CURSOR"].(string)
		out <- Entry{Time: time.UnixMicro(us), Tenant: tenant, JobID: job, Line: message(f["MESSAGE"]), cursor: cursor}
	}
	return sc.Err()
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
