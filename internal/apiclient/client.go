// Package apiclient speaks the core's public API for hostcronctl: one
// request helper that turns the API's Problem bodies into errors, and the
// few shapes the command line prints as tables. It decodes leniently, so
// a newer core's extra fields never break an older client.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one core API with one key.
type Client struct {
	BaseURL string // e.g. https://cron.example.net (the /api/v1 prefix is added)
	Key     string // X-API-Key
	HTTP    *http.Client
}

// Error is a failed request as the API described it.
type Error struct {
	Status  int
	Code    string
	Field   string
	Message string
}

func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// maxResponse bounds what one answer may hold (a logs query of 5,000
// lines is far below it).
const maxResponse = 32 << 20

// Do sends a request and returns the answer's body. body, if not nil, is
// sent as JSON; header adds request headers (If-Match).
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body any, header map[string]string) (json.RawMessage, error) {
	if c.BaseURL == "" {
		return nil, errors.New("no API address: set --api, HOSTCRON_API or the config file")
	}
	u := strings.TrimRight(c.BaseURL, "/") + "/api/v1" + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rdr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-API-Key", c.Key)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 2 * time.Minute, CheckRedirect: refuseRedirect}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return nil, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return nil, problem(resp.StatusCode, out)
	}
	if resp.StatusCode == http.StatusNoContent {
		return json.RawMessage("{}"), nil
	}
	return out, nil
}

// refuseRedirect never follows a redirect: Go would carry X-API-Key (and a
// POST's body) to wherever the answer points.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("the API redirected to %s; not following it with the key (point --api at the final address)", req.URL.Redacted())
}

// CheckBaseURL refuses a base URL that would send the key in the clear
// to another machine: https, or http to a loopback address.
func CheckBaseURL(base string) error {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fmt.Errorf("API address %q: want an absolute http(s) URL", base)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return nil
		}
		return fmt.Errorf("API address %s: http would send the key in the clear; use https (or --allow-http)", base)
	}
	return fmt.Errorf("API address %q: want http or https", base)
}

// problem reads the API's error body, or keeps the start of anything else
// (a proxy's HTML page).
func problem(status int, body []byte) error {
	var p struct {
		Error struct {
			Code, Message, Field string
		} `json:"error"`
	}
	if json.Unmarshal(body, &p) == nil && p.Error.Code != "" {
		return &Error{Status: status, Code: p.Error.Code, Field: p.Error.Field, Message: p.Error.Message}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &Error{Status: status, Message: msg}
}

// Job is what the command line shows of a cron job.
type Job struct {
	ID                  string     `json:"id"`
	TenantID            string     `json:"tenant_id"`
	Schedule            string     `json:"schedule"`
	Timezone            string     `json:"timezone"`
	Command             string     `json:"command"`
	Enabled             bool       `json:"enabled"`
	Status              string     `json:"status"`
	StatusMessage       string     `json:"status_message"`
	Version             int64      `json:"version"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	NextRunAt           *time.Time `json:"next_run_at"`
}

// Settled reports whether provisioning is over: the job is on its nodes
// (or off them), or it failed.
func (j Job) Settled() bool { return j.Status != "pending" && j.Status != "deleting" }

// Run is what the command line shows of a run.
type Run struct {
	ID            int64      `json:"id"`
	RunKey        string     `json:"run_key"`
	ScheduledAt   time.Time  `json:"scheduled_at"`
	StartedAt     *time.Time `json:"started_at"`
	DurationMS    *int64     `json:"duration_ms"`
	Result        string     `json:"result"`
	ExitCode      *int       `json:"exit_code"`
	FailureReason string     `json:"failure_reason"`
}

// Slot is one fire time of a job's schedule and what became of it.
type Slot struct {
	ScheduledAt *time.Time `json:"scheduled_at"` // nil for a dst_gap
	WallTime    string     `json:"wall_time"`
	State       string     `json:"state"`
	OffSchedule bool       `json:"off_schedule"`
	Run         *Run       `json:"run"`
}

// Line is one line of a job's output.
type Line struct {
	Timestamp time.Time `json:"timestamp"`
	Node      string    `json:"node"`
	CronJobID string    `json:"cron_job_id"`
	Line      string    `json:"line"`
}

// Key is an API key as listed (never with its secret).
type Key struct {
	ID        string     `json:"id"`
	Scope     string     `json:"scope"`
	TenantID  string     `json:"tenant_id"`
	Name      string     `json:"name"`
	ReadOnly  bool       `json:"read_only"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

// Decode unmarshals an answer's field (or the whole answer when field is
// empty) into v.
func Decode(raw json.RawMessage, field string, v any) error {
	if field != "" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		raw = m[field]
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
