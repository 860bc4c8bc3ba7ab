package outcome

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

const (
	jobA = "0b7f6c1e-2f44-4d2a-9a53-1c2d3e4f5a6b"
	jobB = "1c8a7d2f-3a55-4e3b-8b64-2d3e4f5a6b7c"
)

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	transient := errors.New("post outcome: 503")
	tests := []struct {
		name string
		err  error
		age  time.Duration
		want Verdict
	}{
		{"accepted", nil, time.Hour, Delivered},
		{"5xx keeps it", transient, time.Hour, Retry},
		{"5xx at 23h keeps it", transient, 23 * time.Hour, Retry},
		{"5xx after 24h dead-letters", transient, 25 * time.Hour, DeadLetter},
		{"permanent 4xx dead-letters", ErrPermanent, time.Minute, DeadLetter},
	}
	for _, tt := range tests {
		if got := Decide(tt.err, t0, t0.Add(tt.age)); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	if d := Backoff(1, 0.999); d > BackoffBase || d < BackoffBase/2 {
		t.Errorf("first backoff %v", d)
	}
	prev := time.Duration(0)
	for n := 1; n < 40; n++ {
		d := Backoff(n, 0.999)
		if d > BackoffCap || d < prev {
			t.Errorf("backoff(%d) = %v after %v", n, d, prev)
		}
		prev = d
	}
	if Backoff(3, 0) == Backoff(3, 0.9) {
		t.Error("no jitter")
	}
}

func TestPermanentStatus(t *testing.T) {
	for code, want := range map[int]bool{400: true, 404: true, 409: true, 422: true, 401: false, 403: false, 408: false, 429: false, 500: false, 503: false} {
		if permanentStatus(code) != want {
			t.Errorf("%d: permanent = %v", code, !want)
		}
	}
}

// TestRedeliverNeverBlocks: one report the API keeps failing does not hold
// up the others; a 5xx keeps it, with its own backoff; a 400 moves it to
// the dead-letter directory; nothing is deleted that was not delivered.
func TestRedeliverNeverBlocks(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep wire.Outcome
		_ = json.NewDecoder(r.Body).Decode(&rep)
		switch rep.FailureReason {
		case "5xx":
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		case "400":
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, rep.RunKey)
		mu.Unlock()
	}))
	defer srv.Close()
	c := Client{BaseURL: srv.URL, Credential: "secret"}
	dir := t.TempDir()
	t0 := time.Now()
	keys := map[string]string{}
	for i, why := range []string{"5xx", "ok", "400", "ok"} {
		key := runkey.Scheduled(jobA, t0.Add(time.Duration(-i)*time.Minute))
		keys[why+string(rune('0'+i))] = key
		if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultSuccess, FailureReason: why}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := Redeliver(context.Background(), c, dir, time.Now())
	if st.Delivered != 2 || st.Retrying != 1 || st.DeadLettered != 1 || err == nil {
		t.Fatalf("first pass %+v, %v", st, err)
	}
	if pending, dead := SpoolCounts(dir); pending != 1 || dead != 1 {
		t.Fatalf("spool has %d pending, %d dead", pending, dead)
	}
	// Nothing else is due: the failing report is the pass's one probe.
	st, _ = Redeliver(context.Background(), c, dir, time.Now())
	if st.Retrying != 1 || st.Delivered != 0 {
		t.Errorf("second pass %+v", st)
	}
	// After 24 h of 5xx it is dead-lettered, not deleted.
	st, _ = Redeliver(context.Background(), c, dir, time.Now().Add(MaxSpoolAge+time.Hour))
	if st.DeadLettered != 1 {
		t.Errorf("late pass %+v", st)
	}
	if pending, dead := SpoolCounts(dir); pending != 0 || dead != 2 {
		t.Errorf("spool has %d pending, %d dead", pending, dead)
	}
	if len(got) != 2 {
		t.Errorf("delivered %v", got)
	}
}

// TestSpoolNames: the file name comes from the job id the hook was given
// and the run key; a report cannot name another job's run, and spooling
// the same run twice keeps one copy.
func TestSpoolNames(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Scheduled(jobB, time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC))
	if err := Spool(dir, jobB, wire.Outcome{RunKey: key, Result: wire.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	// Tenant A's record claims B's run key: refused, B's report untouched.
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultFailed}); err == nil {
		t.Fatal("spooled a report under another job's run key")
	}
	for _, bad := range []string{"../../etc/passwd", jobA + "#scheduled#x", ""} {
		if err := Spool(dir, jobA, wire.Outcome{RunKey: bad}); err == nil {
			t.Errorf("spooled run key %q", bad)
		}
	}
	_ = Spool(dir, jobB, wire.Outcome{RunKey: key, Result: wire.ResultSuccess})
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != SpoolName(jobB, key) {
		t.Fatalf("spool holds %v", entries)
	}
	b, _ := os.ReadFile(filepath.Join(dir, entries[0].Name()))
	var s Spooled
	if err := json.Unmarshal(b, &s); err != nil || s.Report.Result != wire.ResultSuccess || s.JobID != jobB {
		t.Errorf("B's report changed: %s", b)
	}
	if info, _ := os.Stat(filepath.Join(dir, entries[0].Name())); info.Mode().Perm() != 0o600 {
		t.Errorf("spool file mode %v", info.Mode())
	}
}

// TestRedeliverRecoversAtOnce: during an outage reports back off (far
// fewer posts than passes times reports, and a pass with nothing due costs
// one probe), and the pass that finds the API up delivers every report,
// however far its backoff had grown.
func TestRedeliverRecoversAtOnce(t *testing.T) {
	var mu sync.Mutex
	up, posts := false, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		posts++
		if !up {
			http.Error(w, "down", http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	c := Client{BaseURL: srv.URL}
	dir := t.TempDir()
	t0 := time.Now()
	for i := range 5 {
		_ = Spool(dir, jobA, wire.Outcome{RunKey: runkey.Scheduled(jobA, t0.Add(time.Duration(-i)*time.Minute)), Result: wire.ResultSuccess})
	}
	now := time.Now()
	for range 60 {
		before := posts
		st, _ := Redeliver(context.Background(), c, dir, now)
		if st.Retrying+st.Waiting != 5 || (st.Waiting == 4 && posts-before != 1) {
			t.Fatalf("pass during the outage: %+v, %d posts", st, posts-before)
		}
		now = now.Add(2 * time.Second)
	}
	if posts > 60*5/3 {
		t.Errorf("%d posts in 60 passes of 5 reports: no backoff", posts)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	st, err := Redeliver(context.Background(), c, dir, now)
	if err != nil || st.Delivered != 5 {
		t.Fatalf("first pass after the outage: %+v, %v", st, err)
	}
}
