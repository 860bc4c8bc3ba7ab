package outcome

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
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

// Two reports of one run key from one node: a run-now's first start hit a
// shared-storage error and spooled platform_error; the agent started the
// service again, the request ran (exit 3), and that start's hook spooled
// the real result under the same file name while the agent's redelivery
// was posting the first report (a blackholed core holds a post up to the
// agent's 10 s timeout). Whatever the core answers that post (5xx, 200,
// a permanent 4xx), the newer report stays in the spool, untouched, and
// the next pass delivers it: redelivery acts on the copy it claimed, never
// on the name the hook writes (found by review s20a).
func TestRedeliveryNeverOverwritesANewerReportOfTheSameRun(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusOK, http.StatusBadRequest} {
		dir := t.TempDir()
		key := runkey.Manual(jobA, "42")
		at := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
		first := wire.Outcome{RunKey: key, Version: 3, ScheduledAt: at, Result: wire.ResultPlatformError, FailureReason: "node n1: read slot stamp: input/output error"}
		code := 3
		second := wire.Outcome{RunKey: key, Version: 3, ScheduledAt: at, Result: wire.ResultExitCode, ExitCode: &code}
		if err := Spool(dir, jobA, first); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var rep wire.Outcome
			_ = json.NewDecoder(r.Body).Decode(&rep)
			if rep.Result == wire.ResultPlatformError {
				// Meanwhile, on the node: the second start's hook cannot
				// reach the core either and spools its report.
				if err := Spool(dir, jobA, second); err != nil {
					t.Error(err)
				}
			}
			w.WriteHeader(status)
		}))
		_, _ = Redeliver(context.Background(), Client{BaseURL: srv.URL, HTTP: srv.Client()}, dir, time.Now())
		srv.Close()

		s, err := readSpool(dir, SpoolName(jobA, key))
		if err != nil {
			t.Errorf("core answered %d: the real result (exit 3) spooled during the post is gone from the spool: %v", status, err)
			continue
		}
		if s.Report.Result != wire.ResultExitCode || s.Attempts != 0 {
			t.Errorf("core answered %d: spool holds %s after %d attempts, want the newer exit_code report as its hook spooled it", status, s.Report.Result, s.Attempts)
		}
		wantDead := 0
		if status == http.StatusBadRequest {
			wantDead = 1 // the older report, refused for good, is kept for an operator
		}
		if pending, dead := SpoolCounts(dir); pending != 1 || dead != wantDead {
			t.Errorf("core answered %d: %d pending, %d dead, want 1 and %d", status, pending, dead, wantDead)
		}
		posted := deliverAll(t, dir)
		if len(posted) != 1 || posted[0] != wire.ResultExitCode {
			t.Errorf("core answered %d: the next pass posted %v, want the exit_code report", status, posted)
		}
	}
}

// TestRedeliveryPostsWhatItClaimed: a hook that spools a newer report of
// the run between the pass's read of the spool and its claim has that
// newer report posted, not the older copy the pass read.
func TestRedeliveryPostsWhatItClaimed(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "7")
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultPlatformError}); err != nil {
		t.Fatal(err)
	}
	var st Stats
	items, errs := loadSpool(dir, time.Now(), &st)
	if len(items) != 1 || len(errs) != 0 {
		t.Fatalf("loaded %v, %v", items, errs)
	}
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	var got []wire.Result
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep wire.Outcome
		_ = json.NewDecoder(r.Body).Decode(&rep)
		got = append(got, rep.Result)
	}))
	err := attempt(context.Background(), Client{BaseURL: srv.URL}, dir, items[0], time.Now(), &st)
	srv.Close() // waits for the handler
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != wire.ResultSuccess || st.Delivered != 1 {
		t.Errorf("posted %v (%+v), want the newer success report", got, st)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("spool holds %v", left)
	}
}

// TestRedeliveryAfterACrash: the agent killed at each step of an attempt
// (after the claim's rename, during the post, after it, inside the retry
// state's write, between the put-back's link and the claim's removal)
// leaves a spool the next pass delivers from: the claimed report is
// counted as pending meanwhile, is delivered (a duplicate at the core if
// its post had gone through), keeps its retry state, and gives way to a
// newer report of its run spooled meanwhile; nothing is left behind.
func TestRedeliveryAfterACrash(t *testing.T) {
	key := runkey.Manual(jobA, "42")
	name := SpoolName(jobA, key)
	claimed := claimPrefix + name
	older := wire.Outcome{RunKey: key, Result: wire.ResultPlatformError}
	code := 3
	newer := wire.Outcome{RunKey: key, Result: wire.ResultExitCode, ExitCode: &code}
	tests := []struct {
		name    string
		files   map[string]Spooled // as the crash left them
		link    bool               // name is a second link of the claim
		status  int                // the core's answer on the next pass
		pending int                // counted before the next pass
		posted  []wire.Result
		left    []string // files in the spool after the next pass
		dead    int
	}{
		{name: "killed after the claim, during the post, or after a delivered post",
			files: map[string]Spooled{claimed: spooled(older, 0)}, status: 200, pending: 1,
			posted: []wire.Result{wire.ResultPlatformError}},
		{name: "a newer report spooled during the post, killed before the put-back",
			files: map[string]Spooled{claimed: spooled(older, 2), name: spooled(newer, 0)}, status: 200, pending: 2,
			posted: []wire.Result{wire.ResultExitCode}},
		{name: "killed after the retry state was written to the claim",
			files: map[string]Spooled{claimed: spooled(older, 3)}, status: 503, pending: 1,
			posted: []wire.Result{wire.ResultPlatformError}, left: []string{name}},
		{name: "killed inside the retry state's write",
			files: map[string]Spooled{claimed: spooled(older, 1), atomicfile.TempPrefix + claimed + "-123": {}}, status: 200, pending: 1,
			posted: []wire.Result{wire.ResultPlatformError}},
		{name: "killed between the put-back's link and the claim's removal",
			files: map[string]Spooled{claimed: spooled(older, 1)}, link: true, status: 200, pending: 2,
			posted: []wire.Result{wire.ResultPlatformError}},
		{name: "killed before the dead-letter's rename",
			files: map[string]Spooled{claimed: spooled(older, 0)}, status: 400, pending: 1,
			posted: []wire.Result{wire.ResultPlatformError}, dead: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, s := range tt.files {
				b, _ := marshal(s)
				if s.JobID == "" {
					b = b[:len(b)/2] // a temporary file cut short
				}
				if err := os.WriteFile(filepath.Join(dir, n), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tt.link {
				if err := os.Link(filepath.Join(dir, claimed), filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			if pending, _ := SpoolCounts(dir); pending != tt.pending {
				t.Errorf("before the pass: %d pending, want %d", pending, tt.pending)
			}
			var mu sync.Mutex
			var posted []wire.Result
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var rep wire.Outcome
				_ = json.NewDecoder(r.Body).Decode(&rep)
				mu.Lock()
				posted = append(posted, rep.Result)
				mu.Unlock()
				w.WriteHeader(tt.status)
			}))
			_, _ = Redeliver(context.Background(), Client{BaseURL: srv.URL}, dir, time.Now())
			srv.Close()
			if !slices.Equal(posted, tt.posted) {
				t.Errorf("posted %v, want %v", posted, tt.posted)
			}
			if left := spoolFiles(t, dir); !slices.Equal(left, tt.left) {
				t.Errorf("spool holds %v, want %v", left, tt.left)
			}
			if _, dead := SpoolCounts(dir); dead != tt.dead {
				t.Errorf("%d dead-lettered, want %d", dead, tt.dead)
			}
			if len(tt.left) == 1 { // retried: the claim's retry state went on
				s, err := readSpool(dir, name)
				if err != nil || s.Attempts != tt.files[claimed].Attempts+1 || s.LastError == "" || !s.NextAttempt.After(time.Now()) {
					t.Errorf("retry state %+v, %v: want attempt %d recorded", s, err, tt.files[claimed].Attempts+1)
				}
			}
		})
	}
}

// TestRedeliveryHoldsTheSpoolAlone: a second redelivery while one runs
// (another goroutine, a second agent) skips its pass and touches nothing,
// so it never mistakes a claim in flight for a crash's leftover.
func TestRedeliveryHoldsTheSpoolAlone(t *testing.T) {
	dir := t.TempDir()
	if err := Spool(dir, jobA, wire.Outcome{RunKey: runkey.Manual(jobA, "1"), Result: wire.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) }))
	defer srv.Close()
	c := Client{BaseURL: srv.URL}
	if st, err := Redeliver(context.Background(), c, dir, time.Now()); err == nil || posts.Load() != 0 || st != (Stats{}) {
		t.Fatalf("second redelivery: %+v, %v, %d posts: want its pass skipped", st, err, posts.Load())
	}
	unlock()
	if st, err := Redeliver(context.Background(), c, dir, time.Now()); err != nil || st.Delivered != 1 {
		t.Fatalf("after the first ended: %+v, %v", st, err)
	}
	if st, err := Redeliver(context.Background(), c, filepath.Join(dir, "none"), time.Now()); err != nil || st != (Stats{}) {
		t.Errorf("no spool directory: %+v, %v", st, err)
	}
}

// TestUndecodableReportReplacedMeanwhileIsNotDeadLettered: a pass reads
// an undecodable report, then a hook spools a good one of the run under
// its name: the good one stays in the spool, only a claimed copy that is
// still bad goes to dead/.
func TestUndecodableReportReplacedMeanwhileIsNotDeadLettered(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "9")
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	name := SpoolName(jobA, key)
	var st Stats
	if err := deadLetterBad(dir, name, &st); err != nil || st.DeadLettered != 0 {
		t.Fatalf("%v, %+v", err, st)
	}
	if left := spoolFiles(t, dir); !slices.Equal(left, []string{name}) {
		t.Fatalf("spool holds %v", left)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := deadLetterBad(dir, name, &st); err == nil || st.DeadLettered != 1 {
		t.Fatalf("%v, %+v", err, st)
	}
	if pending, dead := SpoolCounts(dir); pending != 0 || dead != 1 {
		t.Errorf("%d pending, %d dead", pending, dead)
	}
}

func spooled(r wire.Outcome, attempts int) Spooled {
	now := time.Now().UTC()
	return Spooled{JobID: jobA, Report: r, SpooledAt: now.Add(-time.Hour), Attempts: attempts, NextAttempt: now.Add(time.Duration(attempts) * time.Minute)}
}

func readSpool(dir, name string) (Spooled, error) {
	var s Spooled
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	return s, err
}

// spoolFiles lists every file in the spool but dead/, as the fault tier's
// "spool drained" check does.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// deliverAll runs one pass against a core that takes everything and
// returns what was posted; the spool must be empty after it.
func deliverAll(t *testing.T, dir string) []wire.Result {
	t.Helper()
	c, posted := postingCore(t)
	if _, err := Redeliver(context.Background(), c, dir, time.Now()); err != nil {
		t.Errorf("delivering the spool: %v", err)
	}
	if left := spoolFiles(t, dir); len(left) != 0 {
		t.Errorf("spool holds %v after a pass the core took everything in", left)
	}
	return posted()
}

// postingCore is a core that takes every report; posted returns the
// results posted to it so far, in order.
func postingCore(t *testing.T) (c Client, posted func() []wire.Result) {
	var mu sync.Mutex
	var results []wire.Result
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rep wire.Outcome
		_ = json.NewDecoder(r.Body).Decode(&rep)
		mu.Lock()
		results = append(results, rep.Result)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return Client{BaseURL: srv.URL}, func() []wire.Result {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(results)
	}
}
