package logship

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
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
			"MESSAGE": fmt.Sprintf("line %d", i), "HOSTCRON_TENANT": "acme", "HOSTCRON_CRON_JOB_ID": "job-1"}
		if i%4 == 0 { // a line of another unit: not shipped
			delete(e, "HOSTCRON_TENANT")
		}
		if i == 3 { // not UTF-8: journald gives bytes
			e["MESSAGE"] = []int{'l', 'i', 'n', 'e', ' ', '3', 0xff}
		}
		b, _ := json.Marshal(e)
		fmt.Fprintln(f, string(b))
	}
}

// lokiStub fails the first `down` pushes, then records lines.
type lokiStub struct {
	mu    sync.Mutex
	down  int
	lines map[string]int
	label map[string]string
}

func (l *lokiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down > 0 {
		l.down--
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	var body struct {
		Streams []pushStream `json:"streams"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	for _, s := range body.Streams {
		l.label = s.Stream
		for _, v := range s.Values {
			l.lines[v[1]]++
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
	want := map[string]string{"log_type": "cron", "job": "cron", "node": "node1", "tenant_id": "acme", "cron_job_id": "job-1"}
	for k, v := range want {
		if stub.label[k] != v {
			t.Errorf("label %s = %q, want %q", k, stub.label[k], v)
		}
	}
}
