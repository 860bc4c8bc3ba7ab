// Package desiredset reads a node's desired set from the core API in
// pages (GET /internal/v1/nodes/{node}/desired-jobs), so a converge no
// longer carries the set as one Temporal payload. How the pages make one
// set a node may reconcile by is in docs/semantics.md, "Paged desired
// sets".
package desiredset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// ErrRefused marks an answer that will not change on retry: the core
// refused this node the set it asked for (another node's), or the request
// itself. A converge fails for good on it; 401 (a credential being
// rotated), 404 (a core replica from before the endpoint, in a rolling
// deploy), 408, 429 and 5xx are retried.
var ErrRefused = errors.New("desired set refused by the core API")

// PageFunc reads the page of the node's set after the cursor after ("" for
// the first).
type PageFunc func(ctx context.Context, after string) (wire.DesiredPage, error)

// Assemble reads pages until one has no Next and returns the whole set,
// with the Common of the pages' snapshots and each page's id range with
// its own snapshot (Pages): every job is listed, or not, by the one page
// whose id range holds it, so a unit the set lacks is judged an orphan by
// that page's snapshot, the read that found it absent, which its
// tombstone records (docs/semantics.md, "Paged desired sets"). A page
// out of id order, or one that names a Next that is not its last id, is
// refused: the cursor must move forward, or the set could list a job
// twice or loop forever (and the pages' ranges would not partition the
// ids).
func Assemble(ctx context.Context, page PageFunc) (wire.DesiredSet, error) {
	var set wire.DesiredSet
	after := ""
	for n := 0; ; n++ {
		p, err := page(ctx, after)
		if err != nil {
			return wire.DesiredSet{}, fmt.Errorf("desired set page %d (after %q): %w", n+1, after, err)
		}
		if err := checkPage(p, after); err != nil {
			return wire.DesiredSet{}, fmt.Errorf("desired set page %d (after %q): %w", n+1, after, err)
		}
		set.Jobs = append(set.Jobs, p.Jobs...)
		set.Pages = append(set.Pages, wire.PageSnapshot{Last: p.Next, Snapshot: p.Snapshot})
		if n == 0 {
			set.Snapshot = p.Snapshot
		} else {
			set.Snapshot = set.Snapshot.Common(p.Snapshot)
		}
		if p.Next == "" {
			return set, nil
		}
		after = p.Next
	}
}

// checkPage holds a page to the keyset contract: ids strictly ascending
// and after the cursor, Next empty or the page's last id. Ids are UUIDs
// in canonical lower-case text, which sort as PostgreSQL orders uuid (by
// their bytes), so the core's order is the string order.
func checkPage(p wire.DesiredPage, after string) error {
	prev := after
	for _, j := range p.Jobs {
		if j.ID <= prev {
			return fmt.Errorf("job %s is not after %q: pages out of order", j.ID, prev)
		}
		prev = j.ID
	}
	if p.Next != "" && (len(p.Jobs) == 0 || p.Next != p.Jobs[len(p.Jobs)-1].ID) {
		return fmt.Errorf("next cursor %q is not the page's last job", p.Next)
	}
	return nil
}

// maxPage bounds one page's answer: MaxDesiredPageSize jobs of the largest
// size a job may have (a 4 KiB command, its environment) is far below it.
const maxPage = 32 << 20

// Client reads desired sets from the core API as one node.
type Client struct {
	BaseURL    string
	Credential string
	HTTP       *http.Client
	PageSize   int // jobs per page; 0: wire.DesiredPageSize, at most wire.MaxDesiredPageSize
	// Pages verifies every page's core signature before it is used
	// (trust.VerifyPage): the node's trusted core keys and max_age, as
	// for payloads. nil only without trust material (development), where
	// payloads are not verified either.
	Pages *trust.PageVerifier
	Log   *slog.Logger // nil: slog.Default()
}

// DesiredSet reads the whole desired set of nodeID, page by page, and
// logs how long the read took and where (issue 16: a no-op converge's
// time, split between the pages' round trips and the rest).
func (c Client) DesiredSet(ctx context.Context, nodeID string) (wire.DesiredSet, error) {
	var st readStats
	start := time.Now()
	set, err := Assemble(ctx, func(ctx context.Context, after string) (wire.DesiredPage, error) {
		return c.page(ctx, nodeID, after, &st)
	})
	c.log().Info("desired set read", append([]any{"node", nodeID, "jobs", len(set.Jobs), "ok", err == nil,
		"total_ms", ms(time.Since(start))}, st.attrs()...)...)
	return set, err
}

// readStats adds up a set read's pages: round trip to the answer's
// headers, body, signature check, decoding, and the slowest page.
type readStats struct {
	pages                      int
	bytes                      int
	wait, body, verify, decode time.Duration
	slowest                    time.Duration
}

func (s *readStats) attrs() []any {
	return []any{"pages", s.pages, "bytes", s.bytes, "wait_ms", ms(s.wait), "body_ms", ms(s.body),
		"verify_ms", ms(s.verify), "decode_ms", ms(s.decode), "slowest_page_ms", ms(s.slowest)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Page reads one page of nodeID's desired set.
func (c Client) Page(ctx context.Context, nodeID, after string) (wire.DesiredPage, error) {
	return c.page(ctx, nodeID, after, &readStats{})
}

func (c Client) page(ctx context.Context, nodeID, after string, st *readStats) (wire.DesiredPage, error) {
	t0 := time.Now()
	defer func() {
		st.pages++
		st.slowest = max(st.slowest, time.Since(t0))
	}()
	size := min(c.PageSize, wire.MaxDesiredPageSize)
	if size <= 0 {
		size = wire.DesiredPageSize
	}
	q := url.Values{"limit": {strconv.Itoa(size)}}
	if after != "" {
		q.Set("after", after)
	}
	resp, err := c.get(ctx, nodeID, "/desired-jobs?"+q.Encode())
	if err != nil {
		return wire.DesiredPage{}, fmt.Errorf("desired page: %w", err)
	}
	defer resp.Body.Close()
	t1 := time.Now()
	st.wait += t1.Sub(t0)
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPage+1))
	t2 := time.Now()
	st.body += t2.Sub(t1)
	st.bytes += len(body)
	if err != nil {
		return wire.DesiredPage{}, fmt.Errorf("desired page: read answer: %w", err)
	}
	if len(body) > maxPage {
		return wire.DesiredPage{}, fmt.Errorf("%w: a page over %d bytes", ErrRefused, maxPage)
	}
	if resp.StatusCode != http.StatusOK {
		return wire.DesiredPage{}, answerError(resp.StatusCode, body)
	}
	if c.Pages != nil {
		// Before anything in the page is believed: a page the core did
		// not sign for this very request fails the whole read, so no
		// partial or foreign set is ever reconciled. Not ErrRefused: like
		// a payload the codec refuses, the attempt fails and Temporal
		// retries it within the node timeout (an interception may pass,
		// a page re-read is signed afresh).
		req := trust.PageRequest{Node: nodeID, After: after, Limit: size}
		if err := c.Pages.Verify(req, body, resp.Header.Get(trust.PageSignatureHeader)); err != nil {
			c.log().Error("desired-set page refused: not signed by the core for this request; nothing is reconciled",
				"node", nodeID, "after", after, "limit", size, "url", c.BaseURL, "err", err)
			return wire.DesiredPage{}, fmt.Errorf("desired page: %w", err)
		}
	}
	t3 := time.Now()
	st.verify += t3.Sub(t2)
	var p wire.DesiredPage
	if err := json.Unmarshal(body, &p); err != nil {
		return wire.DesiredPage{}, fmt.Errorf("desired page: decode: %w", err)
	}
	st.decode += time.Since(t3)
	return p, nil
}

// maxDigest bounds a digest's answer: {"digest":"<64 hex>","jobs":n} is
// under 100 bytes; a Problem under a few hundred.
const maxDigest = 4 << 10

// Digest reads the digest of nodeID's whole desired set
// (GET /internal/v1/nodes/{node}/desired-digest; docs/semantics.md, "The
// desired set's digest"): the converge fast path compares it with the
// digest of the set its last no-op converge planned nothing for. Errors
// are those of a page: 409 revisions_ahead is wire.ErrRevisionsAhead, a
// refusal that will not change is ErrRefused, and 404 (a core from before
// the endpoint) a plain error on which the node reads the set in full.
// With Pages the answer must carry the core's signature for the cursor
// wire.DesiredDigestCursor and limit 0, which no page has, so neither a
// page nor a digest passes as the other.
func (c Client) Digest(ctx context.Context, nodeID string) (wire.DesiredDigest, error) {
	resp, err := c.get(ctx, nodeID, "/desired-digest")
	if err != nil {
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDigest+1))
	if err != nil {
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: read answer: %w", err)
	}
	if len(body) > maxDigest {
		if resp.StatusCode != http.StatusOK {
			// A proxy's large error page: its status decides, as for a page.
			return wire.DesiredDigest{}, answerError(resp.StatusCode, nil)
		}
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: an answer over %d bytes", maxDigest)
	}
	if resp.StatusCode != http.StatusOK {
		return wire.DesiredDigest{}, answerError(resp.StatusCode, body)
	}
	if c.Pages != nil {
		sreq := trust.PageRequest{Node: nodeID, After: wire.DesiredDigestCursor, Limit: 0}
		if err := c.Pages.Verify(sreq, body, resp.Header.Get(trust.PageSignatureHeader)); err != nil {
			c.log().Error("desired-set digest refused: not signed by the core for this request; the set is read in full",
				"node", nodeID, "url", c.BaseURL, "err", err)
			return wire.DesiredDigest{}, fmt.Errorf("desired digest: %w", err)
		}
	}
	return decodeDigest(body)
}

// decodeDigest reads a digest strictly: one JSON object, a digest of 64
// lower-case hex digits (what wire.SetDigest makes; a missing one is "")
// and a count that is not negative. Fields it does not know are ignored,
// as in a page, so a later core may add some without costing older nodes
// their fast path.
func decodeDigest(body []byte) (wire.DesiredDigest, error) {
	var d wire.DesiredDigest
	if err := json.Unmarshal(body, &d); err != nil {
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: decode: %w", err)
	}
	if !isDigest(d.Digest) {
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: %q is not 64 lower-case hex digits", d.Digest)
	}
	if d.Jobs < 0 {
		return wire.DesiredDigest{}, fmt.Errorf("desired digest: %d jobs", d.Jobs)
	}
	return d, nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// get asks the core for path under nodeID's internal resources, as this
// node (its credential); the caller reads and closes the answer.
func (c Client) get(ctx context.Context, nodeID, path string) (*http.Response, error) {
	u := c.BaseURL + "/internal/v1/nodes/" + url.PathEscape(nodeID) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Credential)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

func (c Client) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// answerError turns a refusal into an error: the revisions check into
// wire.ErrRevisionsAhead, a refusal that will not change into ErrRefused.
func answerError(status int, body []byte) error {
	var problem struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &problem) // a proxy's page has no Problem
	msg := fmt.Sprintf("core API answered %d %s: %s", status, problem.Error.Code, problem.Error.Message)
	switch {
	case problem.Error.Code == "revisions_ahead":
		return fmt.Errorf("%w: %s", wire.ErrRevisionsAhead, msg)
	case status == http.StatusUnauthorized, status == http.StatusNotFound, status == http.StatusRequestTimeout,
		status == http.StatusTooManyRequests, status >= 500:
		return errors.New(msg)
	case status >= 400:
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	}
	return errors.New(msg)
}
