package logship

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Client talks to Loki's HTTP API.
type Client struct {
	URL   string // base URL, e.g. http://127.0.0.1:3100
	OrgID string // X-Scope-OrgID, when Loki runs multi-tenant
	// Credentials: a bearer token, or basic auth (Username, Password).
	BearerToken        string
	Username, Password string
	HTTP               *http.Client
}

func (c *Client) do(req *http.Request) (*http.Response, error) {
	if c.OrgID != "" {
		req.Header.Set("X-Scope-OrgID", c.OrgID)
	}
	switch {
	case c.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+c.BearerToken)
	case c.Username != "":
		req.SetBasicAuth(c.Username, c.Password)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	return hc.Do(req)
}

// pushStream is one stream of the push API. Each value is [timestamp,
// line, structured metadata].
type pushStream struct {
	Stream map[string]string `json:"stream"`
	Values [][3]any          `json:"values"`
}

// PushError is a push Loki answered with a status other than 2xx.
type PushError struct {
	Status int
	Body   string
}

func (e *PushError) Error() string { return fmt.Sprintf("push: %d %s", e.Status, e.Body) }

// Push sends entries as one stream per tenant, labelled log_type=cron,
// job=cron, node and tenant_id (the tenant's name). cron_job_id and the
// run's invocation_id travel as structured metadata of each line: as
// labels they would make one stream per job (or run) and node, beyond
// Loki's stream limits at ten thousand jobs.
func (c *Client) Push(ctx context.Context, node string, entries []Entry) error {
	streams := map[string]*pushStream{}
	var keys []string
	for _, e := range entries {
		s, ok := streams[e.Tenant]
		if !ok {
			s = &pushStream{Stream: map[string]string{
				wire.LabelLogType: wire.LogTypeCron, wire.LabelJob: wire.LogTypeCron, wire.LabelNode: node,
				wire.LabelTenant: e.Tenant,
			}}
			streams[e.Tenant] = s
			keys = append(keys, e.Tenant)
		}
		meta := map[string]string{wire.LabelCronJobID: e.JobID}
		if e.Invocation != "" {
			meta[wire.LabelInvocationID] = e.Invocation
		}
		s.Values = append(s.Values, [3]any{strconv.FormatInt(e.Time.UnixNano(), 10), e.Line, meta})
	}
	body := struct {
		Streams []*pushStream `json:"streams"`
	}{}
	for _, k := range keys {
		body.Streams = append(body.Streams, streams[k])
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode push: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/loki/api/v1/push", bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.do(req)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &PushError{Status: resp.StatusCode, Body: string(bytes.TrimSpace(msg))}
	}
	return nil
}

// Line is one log line a query returned.
type Line struct {
	Timestamp time.Time `json:"timestamp"`
	Node      string    `json:"node"`
	CronJobID string    `json:"cron_job_id"`
	Line      string    `json:"line"`
	// InvocationID is the run's systemd invocation ("" for lines shipped
	// before it was carried).
	InvocationID string `json:"invocation_id"`
}

// QueryRange runs a LogQL log query over [start, end], newest first.
func (c *Client) QueryRange(ctx context.Context, query string, start, end time.Time, limit int) ([]Line, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/loki/api/v1/query_range", nil)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	q := req.URL.Query()
	q.Set("query", query)
	q.Set("start", strconv.FormatInt(start.UnixNano(), 10))
	q.Set("end", strconv.FormatInt(end.UnixNano(), 10))
	q.Set("limit", strconv.Itoa(limit))
	q.Set("direction", "backward")
	req.URL.RawQuery = q.Encode()
	resp, err := c.do(req)
	if err != nil {
		return nil, fmt.Errorf("query loki: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("query loki: %s %s", resp.Status, bytes.TrimSpace(msg))
	}
	var body struct {
		Data struct {
			Result []struct {
				Stream map[string]string `json:"stream"`
				Values [][2]string       `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode loki answer: %w", err)
	}
	var out []Line
	for _, r := range body.Data.Result {
		for _, v := range r.Values {
			ns, err := strconv.ParseInt(v[0], 10, 64)
			if err != nil {
				continue
			}
			out = append(out, Line{Timestamp: time.Unix(0, ns).UTC(), Node: r.Stream[wire.LabelNode], CronJobID: r.Stream[wire.LabelCronJobID], Line: v[1],
				InvocationID: r.Stream[wire.LabelInvocationID]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp.After(out[j].Timestamp) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// CronLogQuery builds the LogQL for a tenant's cron logs. Every value is a
// quoted string literal (LogQL uses Go's syntax), the tenant selector is
// always present, and the job, run (invocation) and line filters can only
// narrow: no parameter can reach another tenant's streams. cron_job_id and
// invocation_id are structured metadata, not labels, so they are label
// filters after the selector.
func CronLogQuery(tenantName, jobID, invocation, contains string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{%s=%q, %s=`, wire.LabelLogType, wire.LogTypeCron, wire.LabelTenant)
	b.WriteString(strconv.Quote(tenantName))
	b.WriteString(`}`)
	if jobID != "" {
		b.WriteString(` | ` + wire.LabelCronJobID + `=`)
		b.WriteString(strconv.Quote(jobID))
	}
	if invocation != "" {
		b.WriteString(` | ` + wire.LabelInvocationID + `=`)
		b.WriteString(strconv.Quote(invocation))
	}
	if contains != "" {
		b.WriteString(` |= `)
		b.WriteString(strconv.Quote(contains))
	}
	return b.String()
}
