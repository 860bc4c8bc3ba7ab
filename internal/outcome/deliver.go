package outcome

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/wire"
)

// Spooled is one undelivered report on disk.
type Spooled struct {
	JobID  string       `json:"job_id"`
	Report wire.Outcome `json:"report"`
}

// ErrPermanent marks an answer that will not change on retry (400, 404):
// the report is dropped rather than retried forever.
var ErrPermanent = errors.New("rejected by the core API")

// Client posts reports to the core API as one node.
type Client struct {
	BaseURL    string
	Credential string
	HTTP       *http.Client
}

// Post delivers one report.
func (c Client) Post(ctx context.Context, jobID string, r wire.Outcome) error {
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode outcome: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/internal/v1/cron-jobs/"+jobID+"/outcome", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("outcome request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Credential)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("post outcome: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("post outcome: %d %s: %w", resp.StatusCode, bytes.TrimSpace(msg), ErrPermanent)
	default:
		return fmt.Errorf("post outcome: %d %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
}

// Spool stores a report durably for later delivery. Its file name derives
// from the run key, so spooling the same report twice keeps one copy.
func Spool(dir, jobID string, r wire.Outcome) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	b, err := json.Marshal(Spooled{JobID: jobID, Report: r})
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	sum := sha256.Sum256([]byte(r.RunKey))
	name := filepath.Join(dir, hex.EncodeToString(sum[:12])+".json")
	if err := atomicfile.Write(name, b, 0o600); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// Redeliver posts spooled reports, oldest first, removing each one the API
// accepted or rejected for good. It stops at the first transient failure
// (the API is probably down) and returns how many it delivered.
func Redeliver(ctx context.Context, c Client, dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redeliver: %w", err)
	}
	type item struct {
		path string
		mod  time.Time
	}
	var items []item
	for _, e := range entries {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".json" {
			if info, err := e.Info(); err == nil {
				items = append(items, item{filepath.Join(dir, e.Name()), info.ModTime()})
			}
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].mod.Before(items[j].mod) })
	sent := 0
	for _, it := range items {
		b, err := os.ReadFile(it.path)
		if err != nil {
			return sent, fmt.Errorf("redeliver: %w", err)
		}
		var s Spooled
		if err := json.Unmarshal(b, &s); err != nil {
			_ = os.Rename(it.path, it.path+".bad") // keep for an operator, out of the way
			continue
		}
		err = c.Post(ctx, s.JobID, s.Report)
		if err != nil && !errors.Is(err, ErrPermanent) {
			return sent, err
		}
		if err := os.Remove(it.path); err != nil {
			return sent, fmt.Errorf("redeliver: %w", err)
		}
		if err == nil {
			sent++
		}
	}
	return sent, nil
}
