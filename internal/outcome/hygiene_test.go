package outcome

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// Two reports of one run can both be given up on: a hook's report the
// core refused with a 4xx, and a later one of the same run that
// redelivery gave up on after MaxSpoolAge (or the core refused too). Both
// are evidence of what the run did, and the second dead letter used to
// replace the first (same file name, SpoolName): each is kept, the second
// under <hash>.2.json, whichever way each got there and in either order.
func TestDeadLettersOfOneRunAreAllKept(t *testing.T) {
	key := runkey.Manual(jobA, "42")
	name := SpoolName(jobA, key)
	second := strings.TrimSuffix(name, ".json") + ".2.json"
	code := 3
	first := wire.Outcome{RunKey: key, Result: wire.ResultPlatformError, FailureReason: "first"}
	later := wire.Outcome{RunKey: key, Result: wire.ResultExitCode, ExitCode: &code, FailureReason: "later"}

	hookRefused := func(t *testing.T, dir string, r wire.Outcome) {
		if err := SpoolDead(dir, jobA, r, fmt.Errorf("post outcome: 400: %w", ErrPermanent)); err != nil {
			t.Fatal(err)
		}
	}
	// redelivered spools r and runs a pass that gives it up on: the core
	// refuses it (400), or is down (503) past MaxSpoolAge.
	redelivered := func(status int, late time.Duration) func(*testing.T, string, wire.Outcome) {
		return func(t *testing.T, dir string, r wire.Outcome) {
			if err := Spool(dir, jobA, r); err != nil {
				t.Fatal(err)
			}
			st, _ := Redeliver(context.Background(), coreAnswering(t, status), dir, time.Now().Add(late))
			if st.DeadLettered != 1 {
				t.Fatalf("pass %+v, want the report dead-lettered", st)
			}
		}
	}
	refused, givenUp := redelivered(http.StatusBadRequest, 0), redelivered(http.StatusServiceUnavailable, MaxSpoolAge+time.Hour)
	tests := []struct {
		name          string
		first, second func(*testing.T, string, wire.Outcome)
	}{
		{"refused by the hook, then given up on after MaxSpoolAge", hookRefused, givenUp},
		{"refused by the hook, then refused on redelivery", hookRefused, refused},
		{"refused on redelivery, then refused by the hook", refused, hookRefused},
		{"given up on after MaxSpoolAge, then refused by the hook", givenUp, hookRefused},
		{"refused by the hook twice", hookRefused, hookRefused},
		{"refused on redelivery twice", refused, refused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.first(t, dir, first)
			tt.second(t, dir, later)
			got := deadLetters(t, dir)
			if len(got) != 2 || got[name] != "first" || got[second] != "later" {
				t.Errorf("dead/ holds %v, want the first report as %s and the later one as %s", got, name, second)
			}
			if pending, dead := SpoolCounts(dir); pending != 0 || dead != 2 {
				t.Errorf("%d pending, %d dead, want 0 and 2", pending, dead)
			}
			if left := spoolFiles(t, dir); len(left) != 0 {
				t.Errorf("spool holds %v", left)
			}
		})
	}
}

// TestConcurrentDeadLettersOfOneRun: hooks and a redelivery pass that
// dead-letter reports of one run at the same moment each keep theirs:
// none takes a name another took.
func TestConcurrentDeadLettersOfOneRun(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "7")
	report := func(who string) wire.Outcome {
		return wire.Outcome{RunKey: key, Result: wire.ResultPlatformError, FailureReason: who}
	}
	if err := Spool(dir, jobA, report("spooled")); err != nil {
		t.Fatal(err)
	}
	core := coreAnswering(t, http.StatusBadRequest)
	want := []string{"spooled"}
	var wg sync.WaitGroup
	for i := range 8 {
		who := fmt.Sprintf("hook %d", i)
		want = append(want, who)
		wg.Go(func() {
			if err := SpoolDead(dir, jobA, report(who), ErrPermanent); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if st, _ := Redeliver(context.Background(), core, dir, time.Now()); st.DeadLettered != 1 {
			t.Errorf("pass %+v, want the spooled report dead-lettered", st)
		}
	})
	wg.Wait()
	got := slices.Sorted(maps.Values(deadLetters(t, dir)))
	if slices.Sort(want); !slices.Equal(got, want) {
		t.Errorf("dead letters of %v, want one of each of %v", got, want)
	}
	if pending, dead := SpoolCounts(dir); pending != 0 || dead != len(want) || len(spoolFiles(t, dir)) != 0 {
		t.Errorf("%d pending, %d dead, spool holds %v: want every report dead-lettered", pending, dead, spoolFiles(t, dir))
	}
}

// TestDeadLetterNamesAreBounded: past maxDeadLetters of one name the
// report is not dead-lettered, and not lost either: a hook's refused
// report is an error (the hook logs it), a redelivered one stays in the
// spool.
func TestDeadLetterNamesAreBounded(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "9")
	name := SpoolName(jobA, key)
	r := wire.Outcome{RunKey: key, Result: wire.ResultSuccess}
	if err := os.MkdirAll(filepath.Join(dir, DeadLetterDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= maxDeadLetters; n++ {
		to := name
		if n > 1 {
			to = fmt.Sprintf("%s.%d.json", strings.TrimSuffix(name, ".json"), n)
		}
		if err := os.WriteFile(filepath.Join(dir, DeadLetterDir, to), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := SpoolDead(dir, jobA, r, ErrPermanent); err == nil {
		t.Error("a dead letter past the bound was accepted")
	}
	if err := Spool(dir, jobA, r); err != nil {
		t.Fatal(err)
	}
	core := coreAnswering(t, http.StatusBadRequest)
	if st, err := Redeliver(context.Background(), core, dir, time.Now()); err == nil || st.DeadLettered != 0 {
		t.Errorf("a pass that could not dead-letter a report: %+v, %v; want an error and none counted dead-lettered", st, err)
	}
	if pending, dead := SpoolCounts(dir); pending != 1 || dead != maxDeadLetters {
		t.Errorf("%d pending, %d dead, want the report still spooled beside %d dead letters", pending, dead, maxDeadLetters)
	}
	if left := spoolFiles(t, dir); !slices.Equal(left, []string{claimPrefix + name}) {
		t.Errorf("spool holds %v, want the report, claimed, for the next pass to put back", left)
	}
}

func TestStaleTemp(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tmp := atomicfile.TempPrefix + "0123abcd.json-4711"
	tests := []struct {
		name string
		file string
		age  time.Duration
		want bool
	}{
		{"a hook's temporary file, 11 min old", tmp, 11 * time.Minute, true},
		{"a temporary file at TempMaxAge", tmp, TempMaxAge, true},
		{"a claim's temporary file, a day old", atomicfile.TempPrefix + claimPrefix + "0123abcd.json-1", 24 * time.Hour, true},
		{"a temporary file 9 min old: a writer may be at work", tmp, 9 * time.Minute, false},
		{"a temporary file just created", tmp, 0, false},
		{"a temporary file from the future (clock set back)", tmp, -time.Hour, false},
		{"a report", "0123abcd.json", 24 * time.Hour, false},
		{"a claimed report", claimPrefix + "0123abcd.json", 24 * time.Hour, false},
		{"a dead letter's second name", "0123abcd.2.json", 24 * time.Hour, false},
		{"the prefix inside a name", "x" + tmp, 24 * time.Hour, false},
	}
	for _, tt := range tests {
		if got := staleTemp(tt.file, now.Add(-tt.age), now); got != tt.want {
			t.Errorf("%s: remove = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRedeliverRemovesStaleTemps: a hook or a pass killed between the
// creation of its temporary file and its rename leaves the file behind,
// and each such crash left one more for ever. A pass removes those older
// than TempMaxAge, in the spool and in dead/; a young one (a hook may be
// writing it now) and every other file stay as they were.
func TestRedeliverRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, DeadLetterDir)
	key := runkey.Manual(jobA, "1")
	name := SpoolName(jobA, key)
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	files := []struct {
		path  string
		age   time.Duration
		stays bool
	}{
		{filepath.Join(dir, atomicfile.TempPrefix+name+"-111"), TempMaxAge + time.Minute, false},
		{filepath.Join(dead, atomicfile.TempPrefix+name+"-222"), 30 * 24 * time.Hour, false},
		{filepath.Join(dir, atomicfile.TempPrefix+name+"-333"), time.Minute, true},
		{filepath.Join(dead, atomicfile.TempPrefix+name+"-444"), 0, true},
		{filepath.Join(dir, "operator-notes.txt"), 30 * 24 * time.Hour, true},
		{filepath.Join(dead, name), 30 * 24 * time.Hour, true},
		{filepath.Join(dir, name), 30 * 24 * time.Hour, true},
	}
	if err := os.MkdirAll(filepath.Join(dir, atomicfile.TempPrefix+"a-directory"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(f.path); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(f.path, []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		at := now.Add(-f.age)
		if err := os.Chtimes(f.path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	// The core is down: the report stays spooled.
	st, _ := Redeliver(context.Background(), coreAnswering(t, http.StatusServiceUnavailable), dir, now)
	if st.TempsRemoved != 2 || st.Retrying != 1 {
		t.Errorf("pass %+v, want 2 temporary files removed and the report retried", st)
	}
	for _, f := range files {
		if _, err := os.Stat(f.path); (err == nil) != f.stays {
			t.Errorf("%s (%s old): stays = %v, want %v", f.path, f.age, err == nil, f.stays)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, atomicfile.TempPrefix+"a-directory")); err != nil || !fi.IsDir() {
		t.Errorf("a directory named as a temporary file was touched: %v", err)
	}
	if pending, deadN := SpoolCounts(dir); pending != 1 || deadN != 1 {
		t.Errorf("%d pending, %d dead, want 1 and 1", pending, deadN)
	}
}

// coreAnswering is a client of a core that answers every post with status.
func coreAnswering(t *testing.T, status int) Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	t.Cleanup(srv.Close)
	return Client{BaseURL: srv.URL}
}

// deadLetters maps each file in dir's dead/ to its report's
// FailureReason; the test fails on any file that is not a whole report.
func deadLetters(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, DeadLetterDir))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		s, err := readSpool(filepath.Join(dir, DeadLetterDir), e.Name())
		if err != nil || s.JobID != jobA {
			t.Errorf("dead letter %s: %+v, %v", e.Name(), s, err)
		}
		out[e.Name()] = s.Report.FailureReason
	}
	return out
}

// A writer killed after its temporary file was whole (fsynced, not yet
// renamed) left the report it was writing: a pass keeps it as that
// report, in the spool under the name it was meant for, or beside a
// report of the run that took the name since (either may be the newer),
// and a dead letter's in the dead letters; never removed with the
// leftovers (reviews s21b, s21d).
func TestStaleTempHoldingAWholeReportIsKept(t *testing.T) {
	dir := t.TempDir()
	lone := runkey.Manual(jobA, "1")
	leaveStaleTemp(t, dir, wire.Outcome{RunKey: lone, Result: wire.ResultSuccess, FailureReason: "the hook's"})
	taken := runkey.Manual(jobA, "2")
	leaveStaleTemp(t, dir, wire.Outcome{RunKey: taken, Result: wire.ResultSuccess, FailureReason: "the killed hook's"})
	if err := Spool(dir, jobA, wire.Outcome{RunKey: taken, Result: wire.ResultSuccess, FailureReason: "the other hook's"}); err != nil {
		t.Fatal(err)
	}
	dead := runkey.Manual(jobA, "3")
	if err := os.MkdirAll(filepath.Join(dir, DeadLetterDir), 0o700); err != nil {
		t.Fatal(err)
	}
	leaveStaleTemp(t, filepath.Join(dir, DeadLetterDir), wire.Outcome{RunKey: dead, Result: wire.ResultSuccess, FailureReason: "a dead letter's"})
	st, _ := Redeliver(context.Background(), coreAnswering(t, http.StatusServiceUnavailable), dir, time.Now())
	if st.TempsRemoved != 0 || st.Retrying != 3 {
		t.Fatalf("pass %+v, want no file removed and three reports retried (both of run 2)", st)
	}
	for name, want := range map[string]string{
		SpoolName(jobA, lone):  "the hook's",
		SpoolName(jobA, taken): "the other hook's",
		strings.TrimSuffix(SpoolName(jobA, taken), ".json") + ".2.json": "the killed hook's",
	} {
		if s, err := readSpool(dir, name); err != nil || s.Report.FailureReason != want {
			t.Errorf("spooled %s: %+v, %v; want %s report", name, s, err, want)
		}
	}
	if got, want := deadLetters(t, dir), map[string]string{SpoolName(jobA, dead): "a dead letter's"}; !maps.Equal(got, want) {
		t.Errorf("dead letters %v, want %v", got, want)
	}
	if left := spoolFiles(t, dir); slices.ContainsFunc(left, func(n string) bool { return strings.HasPrefix(n, atomicfile.TempPrefix) }) {
		t.Errorf("leftovers still in the spool: %v", left)
	}
}

// leaveStaleTemp leaves a whole report as a killed hook's temporary file
// in d, old enough for a pass to look at.
func leaveStaleTemp(t *testing.T, d string, r wire.Outcome) string {
	t.Helper()
	b, err := marshal(Spooled{JobID: jobA, Report: r, SpooledAt: time.Now().UTC(), NextAttempt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, atomicfile.TempPrefix+SpoolName(jobA, r.RunKey)+"-4711")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-TempMaxAge - time.Minute)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	return path
}

// A whole report a killed hook left that a pass cannot keep now (here
// its name's dead letters are at the bound) stays for the next pass: it
// was removed with the leftovers, the only copy of that report (review
// s21d).
func TestWholeLeftoverThatCannotBeKeptStays(t *testing.T) {
	dir := t.TempDir()
	dead := filepath.Join(dir, DeadLetterDir)
	key := runkey.Manual(jobA, "7")
	name := SpoolName(jobA, key)
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= maxDeadLetters; n++ {
		to := name
		if n > 1 {
			to = fmt.Sprintf("%s.%d.json", strings.TrimSuffix(name, ".json"), n)
		}
		if err := os.WriteFile(filepath.Join(dead, to), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := leaveStaleTemp(t, dead, wire.Outcome{RunKey: key, Result: wire.ResultExitCode, FailureReason: "the real result"})
	st, err := Redeliver(context.Background(), coreAnswering(t, http.StatusServiceUnavailable), dir, time.Now())
	if _, serr := os.Stat(tmp); serr != nil || st.TempsRemoved != 0 || err == nil {
		t.Errorf("a whole report that could not be kept: %v (pass %+v, %v); want it left, and the pass to say why", serr, st, err)
	}
}

// The killed hook's temporary file may be the run's newer report (it was
// replacing the first start's platform_error under the name): it is
// delivered beside the older one, not dead-lettered (review s21d).
func TestNewerLeftoverIsDeliveredNotDeadLettered(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "8")
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultPlatformError, FailureReason: "first start"}); err != nil {
		t.Fatal(err)
	}
	code := 1
	leaveStaleTemp(t, dir, wire.Outcome{RunKey: key, Result: wire.ResultExitCode, ExitCode: &code, FailureReason: "the real result"})
	if posted := passesPosting(t, dir, 3); !slices.Contains(posted, wire.ResultExitCode) {
		pending, dead := SpoolCounts(dir)
		t.Errorf("posted %v: the run's real result was never delivered (%d pending, %d dead letters)", posted, pending, dead)
	}
}

// A leftover kept as a report never takes the name a claimed report goes
// back to: putBack would drop the claimed one as older, and that was the
// run's real result, claimed by a pass that died mid-post (the first
// start's hook killed after its fsync left platform_error; review s21d).
func TestKeptLeftoverNeverTakesAClaimedReportsName(t *testing.T) {
	dir := t.TempDir()
	key := runkey.Manual(jobA, "9")
	leaveStaleTemp(t, dir, wire.Outcome{RunKey: key, Result: wire.ResultPlatformError, FailureReason: "first start"})
	code := 3
	if err := Spool(dir, jobA, wire.Outcome{RunKey: key, Result: wire.ResultExitCode, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
	if err := claim(dir, SpoolName(jobA, key)); err != nil { // the pass that died mid-post
		t.Fatal(err)
	}
	if posted := passesPosting(t, dir, 3); !slices.Contains(posted, wire.ResultExitCode) {
		pending, dead := SpoolCounts(dir)
		t.Errorf("posted %v: the claimed real result (exit 3) was dropped (%d pending, %d dead)", posted, pending, dead)
	}
}

// passesPosting runs n passes over dir against a core that takes every
// report, and returns the results posted, in order.
func passesPosting(t *testing.T, dir string, n int) []wire.Result {
	t.Helper()
	c, posted := postingCore(t)
	for range n {
		_, _ = Redeliver(context.Background(), c, dir, time.Now())
	}
	return posted()
}

// A leftover whose name is not its report's (no writer names one so: a
// damaged or planted file) is kept as evidence, a dead letter under its
// report's name, and never spooled as another run's report, where that
// run's hook or put-back would replace or drop it (review s21e).
func TestLeftoverNamedForAnotherRunIsOnlyEvidence(t *testing.T) {
	dir := t.TempDir()
	keyA := runkey.Manual(jobA, "1")
	nameB := SpoolName(jobB, runkey.Manual(jobB, "1"))
	b, err := marshal(Spooled{JobID: jobA, Report: wire.Outcome{RunKey: keyA, Result: wire.ResultSuccess, FailureReason: "A's"}})
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, atomicfile.TempPrefix+nameB+"-1")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-TempMaxAge - time.Minute)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	st, _ := Redeliver(context.Background(), coreAnswering(t, http.StatusServiceUnavailable), dir, time.Now())
	if pending, _ := SpoolCounts(dir); pending != 0 || st.Retrying != 0 {
		t.Errorf("%d pending after the pass (%+v), want the misnamed report not spooled", pending, st)
	}
	if got, want := deadLetters(t, dir), map[string]string{SpoolName(jobA, keyA): "A's"}; !maps.Equal(got, want) {
		t.Errorf("dead letters %v, want %v", got, want)
	}
}
