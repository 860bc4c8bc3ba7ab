package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
)

// Headers of a webhook request besides notify.SignatureHeader.
const (
	EventIDHeader   = "Hostcron-Event-Id"
	EventKindHeader = "Hostcron-Event-Kind"
	AttemptHeader   = "Hostcron-Delivery-Attempt"
	IdempotencyKey  = "Idempotency-Key"
)

// Timeout bounds one webhook attempt, connection to last byte.
const Timeout = 10 * time.Second

// ErrRefusedAddress is a dial to an address a webhook may not reach.
var ErrRefusedAddress = errors.New("address not allowed for webhooks (loopback, link-local, private, multicast or unspecified)")

// ErrNoPublicAddress is what a delivery's last_error says when the URL's
// host did not resolve, or resolved only to addresses a webhook may not
// reach (ErrRefusedAddress): one message for both, since last_error is
// the tenant's to read and telling them apart would show which internal
// names the platform's resolver knows.
var ErrNoPublicAddress = errors.New("the host has no address a webhook may reach (its name does not resolve, or only to loopback, private or other internal addresses)")

// errRedirect marks a redirect the client did not follow.
var errRedirect = errors.New("redirect refused: webhooks never follow redirects")

// Webhook posts signed webhook bodies.
type Webhook struct {
	Client *http.Client
	Now    func() time.Time
}

// NewWebhook is a webhook poster whose client never follows redirects,
// never uses an environment proxy (that would dial for it, past the
// address check), gives up after Timeout and, unless allowPrivate,
// refuses in the dialer's Control hook, which sees the resolved address
// of every connection, any address notify.AllowedAddr refuses: a name
// that resolves (or re-resolves: DNS rebinding) to an internal address
// is refused at the connection itself.
func NewWebhook(allowPrivate bool) *Webhook {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(network, address string, _ syscall.RawConn) error {
		if allowPrivate || notify.AllowedAddr(address) {
			return nil
		}
		return fmt.Errorf("dial %s: %w", address, ErrRefusedAddress)
	}}
	tr := &http.Transport{Proxy: nil, DialContext: d.DialContext, ForceAttemptHTTP2: true,
		TLSHandshakeTimeout: 5 * time.Second, ResponseHeaderTimeout: Timeout, MaxIdleConns: 16, IdleConnTimeout: 30 * time.Second}
	return &Webhook{Now: time.Now, Client: &http.Client{Transport: tr, Timeout: Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Body is the JSON a webhook receives.
type Body struct {
	ID        int64           `json:"id"` // the event's: the same in every attempt
	Kind      string          `json:"kind"`
	TenantID  string          `json:"tenant_id,omitempty"`   // absent for an operator event
	CronJobID string          `json:"cron_job_id,omitempty"` // absent for an operator event
	ShardID   string          `json:"shard_id,omitempty"`    // an operator event's shard
	RunKey    string          `json:"run_key"`
	CreatedAt time.Time       `json:"created_at"`
	Data      json.RawMessage `json:"data"`
}

// Result is one attempt's outcome.
type Result struct {
	Verdict notify.Verdict
	Status  *int
	Err     error
	Reason  string // metrics label when it failed
}

// Post attempts one delivery.
func (h *Webhook) Post(ctx context.Context, d store.Delivery) Result {
	body, err := json.Marshal(Body{ID: d.EventID, Kind: d.Kind, TenantID: d.TenantID, CronJobID: d.CronJobID,
		ShardID: d.ShardID, RunKey: d.RunKey, CreatedAt: d.CreatedAt, Data: d.Payload})
	if err != nil {
		return Result{Verdict: notify.Permanent, Err: fmt.Errorf("encode body: %w", err), Reason: "encode"}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		return Result{Verdict: notify.Permanent, Err: fmt.Errorf("request: %w", err), Reason: "url"}
	}
	id := strconv.FormatInt(d.EventID, 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hostcron-notify/1")
	req.Header.Set(EventIDHeader, id)
	req.Header.Set(IdempotencyKey, "hostcron-event-"+id)
	req.Header.Set(EventKindHeader, d.Kind)
	req.Header.Set(AttemptHeader, strconv.Itoa(d.Attempts+1))
	req.Header.Set(notify.SignatureHeader, notify.Sign([]byte(d.Secret), body, h.Now()))
	resp, err := h.Client.Do(req)
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, ErrRefusedAddress):
		// Not the dialed address: last_error is the tenant's to read, and
		// the address would map the platform's internal names for them.
		return Result{Verdict: notify.Retry, Err: fmt.Errorf("post: %w", ErrNoPublicAddress), Reason: "refused_address"}
	case errors.As(err, &dnsErr):
		// Nor the resolver's answer (nor its address, which it names).
		return Result{Verdict: notify.Retry, Err: fmt.Errorf("post: %w", ErrNoPublicAddress), Reason: "network"}
	}
	if err != nil {
		return Result{Verdict: notify.Retry, Err: fmt.Errorf("post: %w", err), Reason: "network"}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection, read nothing more
	status := resp.StatusCode
	v := notify.Classify(status)
	switch {
	case v == notify.Delivered:
		return Result{Verdict: v, Status: &status}
	case status >= 300 && status < 400:
		return Result{Verdict: v, Status: &status, Err: fmt.Errorf("%w (status %d)", errRedirect, status), Reason: "redirect"}
	}
	return Result{Verdict: v, Status: &status, Err: fmt.Errorf("receiver answered %s", resp.Status), Reason: "status"}
}
