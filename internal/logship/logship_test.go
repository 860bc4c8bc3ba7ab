package logship

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hostcron/hostcron/internal/metrics"

	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// fakeJournal writes a journalctl stand-in that prints the entries of a
// file after --after-cursor=cN and then follows (sleeps).
func fakeJournal(t *testing.T, dir string) (script, entries string) {
	entries = filepath.Join(dir, "journal")
	script = filepath.Join(dir, "journalctl")
	body := `#!/bin/sh
after=0
for a in "$@"; do case $a in --after-cursor=c*) after=${a#--after-cursor=c};; esac; done
awk -v after="$after" 'NR>after' "` + entries + `"
exec sleep 600
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, entries
}

func appendEntries(t *testing.T, path string, from, to int) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := from; i <= to; i++ {
		e := map[string]any{"__CURSOR": fmt.Sprintf("c%d", i), "__REALTIME_TIMESTAMP": fmt.Sprint(1763700000000000 + i),
			"MESSAGE": fmt.Sprintf("line %d", i), "_SYSTEMD_UNIT": "cron-acme-" + testJob + ".service"}
		if i%4 == 0 { // a line of another unit claiming to be acme's: not shipped
			e["_SYSTEMD_UNIT"] = "php-fpm.service"
			e["HOSTCRON_TENANT"], e["HOSTCRON_CRON_JOB_ID"] = "acme", testJob
		}
		if i == 3 { // not UTF-8: journald gives bytes
			e["MESSAGE"] = []int{'l', 'i', 'n', 'e', ' ', '3', 0xff}
		}
		b, _ := json.Marshal(e)
		fmt.Fprintln(f, string(b))
	}
}

const testJob = "0b7f6c1e-2f44-4d2a-9a53-1c2d3e4f5a6b"

// lokiStub fails the first `down` pushes with downCode (503 if 0), then
// records lines.
type lokiStub struct {
	mu       sync.Mutex
	down     int
	downCode int
	lines    map[string]int
	label    map[string]string
	meta     map[string]string
	auth     string
}

func (l *lokiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.auth = r.Header.Get("Authorization") + "|" + r.Header.Get("X-Scope-OrgID")
	if l.down > 0 {
		l.down--
		http.Error(w, "starting", cmp.Or(l.downCode, http.StatusServiceUnavailable))
		return
	}
	var body struct {
		Streams []struct {
			Stream map[string]string    `json:"stream"`
			Values [][3]json.RawMessage `json:"values"`
		} `json:"streams"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	for _, s := range body.Streams {
		l.label = s.Stream
		for _, v := range s.Values {
			var line string
			_ = json.Unmarshal(v[1], &line)
			_ = json.Unmarshal(v[2], &l.meta)
			l.lines[line]++
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (l *lokiStub) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func shipUntil(t *testing.T, cfg Config, stub *lokiStub, want int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = Run(ctx, cfg); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for stub.count() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // anything extra would arrive now
	cancel()
	<-done
}

// TestShipSurvivesLokiDownAndRestart: lines pushed while Loki is down
// arrive once it is up; a restarted shipper resumes after its cursor, so
// no line is lost or shipped twice.
func TestShipSurvivesLokiDownAndRestart(t *testing.T) {
	dir := t.TempDir()
	script, entries := fakeJournal(t, dir)
	appendEntries(t, entries, 1, 6) // 5 cron lines (4 is another unit's)
	stub := &lokiStub{down: 2, lines: map[string]int{}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	cfg := Config{Loki: &Client{URL: srv.URL}, Node: "node1", CursorFile: filepath.Join(dir, "cursor"),
		BatchWait: 50 * time.Millisecond, Journalctl: script, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	shipUntil(t, cfg, stub, 5)
	if b, _ := os.ReadFile(cfg.CursorFile); string(b) != "c6\n" {
		t.Errorf("cursor %q, want c6", b)
	}
	appendEntries(t, entries, 7, 10)
	shipUntil(t, cfg, stub, 8)
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if len(stub.lines) != 8 {
		t.Errorf("shipped %d distinct lines, want 8: %v", len(stub.lines), stub.lines)
	}
	for line, n := range stub.lines {
		if n != 1 {
			t.Errorf("%q shipped %d times", line, n)
		}
	}
	if _, ok := stub.lines["line 3\uFFFD"]; !ok {
		t.Errorf("binary message not decoded: %v", stub.lines)
	}
	want := map[string]string{"log_type": "cron", "job": "cron", "node": "node1", "tenant_id": "acme"}
	if !maps.Equal(stub.label, want) {
		t.Errorf("labels %v, want %v (cron_job_id is not a label)", stub.label, want)
	}
	if stub.meta["cron_job_id"] != testJob {
		t.Errorf("structured metadata %v, want cron_job_id", stub.meta)
	}
}

// TestLokiRefusalDropsBatch: a 400 drops the batch (counted) and the
// cursor moves on, so later lines still ship; a 429 is retried. Only a
// batch Loki accepted feeds the agent's lag metric (Config.Shipped).
func TestLokiRefusalDropsBatch(t *testing.T) {
	for _, tc := range []struct {
		code     int
		shipped  int
		droppedN int64
	}{{http.StatusBadRequest, 0, 1}, {http.StatusTooManyRequests, 5, 0}} {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			dir := t.TempDir()
			script, entries := fakeJournal(t, dir)
			appendEntries(t, entries, 1, 6)
			stub := &lokiStub{down: 1, downCode: tc.code, lines: map[string]int{}}
			srv := httptest.NewServer(stub)
			defer srv.Close()
			cfg := Config{Loki: &Client{URL: srv.URL, BearerToken: "tok", OrgID: "hosting"}, Node: "node1",
				CursorFile: filepath.Join(dir, "cursor"), BatchWait: 50 * time.Millisecond, Journalctl: script,
				Log: slog.New(slog.NewTextHandler(os.Stderr, nil))}
			nm := metrics.NewNode(nil)
			cfg.Shipped = nm.Shipped
			before, _, _ := Dropped()
			shipUntil(t, cfg, stub, tc.shipped)
			if b, _ := os.ReadFile(cfg.CursorFile); string(b) != "c6\n" {
				t.Errorf("cursor %q, want c6", b)
			}
			if after, _, _ := Dropped(); after-before != tc.droppedN {
				t.Errorf("dropped %d batches, want %d", after-before, tc.droppedN)
			}
			if stub.count() != tc.shipped {
				t.Errorf("shipped %d lines, want %d", stub.count(), tc.shipped)
			}
			var pb dto.Metric
			if err := nm.LogShipLag.(prometheus.Metric).Write(&pb); err != nil {
				t.Fatal(err)
			}
			// The fake journal's lines are from 2025: the lag is that old.
			if n := pb.GetHistogram().GetSampleCount(); (n > 0) != (tc.shipped > 0) || (n > 0 && pb.GetHistogram().GetSampleSum() < 3600) {
				t.Errorf("log ship lag: %d samples summing %vs, for %d lines shipped", n, pb.GetHistogram().GetSampleSum(), tc.shipped)
			}
			if stub.auth != "Bearer tok|hosting" {
				t.Errorf("auth headers %q", stub.auth)
			}
		})
	}
}

// TestDecodeEntryTrustsOnlyTheUnit: tenant and job come from journald's
// _SYSTEMD_UNIT; HOSTCRON_* fields a process logs itself are ignored.
func TestDecodeEntryTrustsOnlyTheUnit(t *testing.T) {
	other := "1c8a7d2f-3a55-4e3b-8b64-2d3e4f5a6b7c"
	tests := []struct {
		name   string
		fields map[string]any
		tenant string // "" = not shipped
	}{
		{"own unit", map[string]any{"_SYSTEMD_UNIT": "cron-acme-" + testJob + ".service"}, "acme"},
		{"hyphenated tenant", map[string]any{"_SYSTEMD_UNIT": "cron-my-shop-" + testJob + ".service"}, "my-shop"},
		{"spoofed fields, own unit", map[string]any{"_SYSTEMD_UNIT": "cron-evil-" + testJob + ".service",
			"HOSTCRON_TENANT": "acme", "HOSTCRON_CRON_JOB_ID": other}, "evil"},
		{"spoofed fields, no unit", map[string]any{"HOSTCRON_TENANT": "acme", "HOSTCRON_CRON_JOB_ID": testJob}, ""},
		{"user unit", map[string]any{"_SYSTEMD_USER_UNIT": "cron-acme-" + testJob + ".service"}, ""},
		{"timer", map[string]any{"_SYSTEMD_UNIT": "cron-acme-" + testJob + ".timer"}, ""},
		{"bad id", map[string]any{"_SYSTEMD_UNIT": "cron-acme-" + strings.ToUpper(testJob) + ".service"}, ""},
		{"bad tenant", map[string]any{"_SYSTEMD_UNIT": "cron-Acme-" + testJob + ".service"}, ""},
	}
	for _, tt := range tests {
		tt.fields["MESSAGE"], tt.fields["__CURSOR"] = "hi", "c1"
		b, _ := json.Marshal(tt.fields)
		e, ok := decodeEntry(b)
		if got := map[bool]string{true: e.Tenant, false: ""}[ok]; got != tt.tenant {
			t.Errorf("%s: tenant %q, want %q", tt.name, got, tt.tenant)
		}
		if ok && e.JobID != testJob {
			t.Errorf("%s: job %q", tt.name, e.JobID)
		}
	}
}

// The run's invocation comes only from journald's trusted field, and only
// in systemd's spelling; anything else ships no invocation.
func TestDecodeEntryInvocation(t *testing.T) {
	const inv = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name   string
		fields map[string]any
		want   string
	}{
		{"journald's field", map[string]any{"_SYSTEMD_INVOCATION_ID": inv}, inv},
		{"the process's own field is not it", map[string]any{"INVOCATION_ID": inv}, ""},
		{"not systemd's spelling", map[string]any{"_SYSTEMD_INVOCATION_ID": `x"} | foo`}, ""},
	} {
		tc.fields["_SYSTEMD_UNIT"], tc.fields["MESSAGE"], tc.fields["__CURSOR"] = "cron-acme-"+testJob+".service", "hi", "c1"
		b, _ := json.Marshal(tc.fields)
		e, ok := decodeEntry(b)
		if !ok || e.Invocation != tc.want {
			t.Errorf("%s: invocation %q (ok %v), want %q", tc.name, e.Invocation, ok, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", MaxLineBytes) // 2 bytes a rune
	got, cut := truncate(long)
	if !cut || len(got) > MaxLineBytes || !strings.HasSuffix(got, TruncatedMarker) || !utf8.ValidString(got) {
		t.Errorf("truncate: cut=%v len=%d", cut, len(got))
	}
	if got, cut := truncate("short"); cut || got != "short" {
		t.Errorf("short line changed: %q", got)
	}
}

// Any local process can log one huge journal field (the native protocol
// takes megabytes; --all prints it in full, a binary MESSAGE as a byte
// array four times its size). Such an entry is skipped: it must not end
// the scan, which would restart journalctl at the same cursor, meet the
// same entry again, and stop shipping for every tenant of the node.
func TestScanSkipsHugeEntry(t *testing.T) {
	entry := func(cursor, msg string) string {
		b, _ := json.Marshal(map[string]any{"_SYSTEMD_UNIT": "cron-acme-" + testJob + ".service",
			"MESSAGE": msg, "__CURSOR": cursor, "__REALTIME_TIMESTAMP": "1700000000000000"})
		return string(b) + "\n"
	}
	in := entry("c1", "before") + entry("c2", strings.Repeat("x", 5<<20)) + entry("c3", "after")
	out := make(chan Entry, 10)
	err := scan(strings.NewReader(in), out)
	var got []string
	for e := range out {
		got = append(got, e.cursor+":"+e.Line)
	}
	if err != nil || len(got) != 2 || got[0] != "c1:before" || got[1] != "c3:after" {
		t.Fatalf("scan = %v, %v; want c1 and c3, no error", got, err)
	}
}

// The run's invocation travels as structured metadata, never as a label
// (one stream per run would exhaust Loki's stream limits).
func TestPushCarriesInvocationAsMetadata(t *testing.T) {
	stub := &lokiStub{lines: map[string]int{}}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	const inv = "0123456789abcdef0123456789abcdef"
	err := (&Client{URL: srv.URL}).Push(context.Background(), "node1", []Entry{{Time: time.Now(), Tenant: "acme", JobID: testJob, Line: "x", Invocation: inv}})
	if err != nil {
		t.Fatal(err)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	if stub.meta["invocation_id"] != inv || stub.meta["cron_job_id"] != testJob {
		t.Errorf("structured metadata %v, want cron_job_id and invocation_id", stub.meta)
	}
	if _, ok := stub.label["invocation_id"]; ok {
		t.Errorf("invocation_id is a stream label: %v", stub.label)
	}
}
