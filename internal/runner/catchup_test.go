package runner

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestDecideCatchUp(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 11, 21, h, m, s, 0, time.UTC) }
	hourly := "0 0 * * * *"
	minutely := "0 * * * * *"
	timer := Start{ByTimer: true}
	for _, tt := range []struct {
		name      string
		schedule  string
		now       time.Time
		window    int // catch-up window, seconds
		notBefore time.Time
		start     Start
		req       *Request
		wantKey   string // "" when it skips
		wantSkip  string
		catchUp   bool
	}{
		{name: "on time, with a window: an ordinary scheduled run", schedule: hourly, now: at(12, 0, 9), window: 3600, start: timer,
			wantKey: id + "#scheduled#2026-11-21T12:00:00Z"},
		{name: "late within the window", schedule: hourly, now: at(12, 40, 0), window: 3600, start: timer,
			wantKey: id + "#scheduled#2026-11-21T12:00:00Z", catchUp: true},
		{name: "late at the window's edge", schedule: hourly, now: at(12, 30, 0), window: 1800, start: timer,
			wantKey: id + "#scheduled#2026-11-21T12:00:00Z", catchUp: true},
		{name: "late beyond the window", schedule: hourly, now: at(12, 30, 1), window: 1800, start: timer, wantSkip: KindLateFire},
		{name: "late without a window (0, or an older spec)", schedule: hourly, now: at(12, 40, 0), start: timer, wantSkip: KindLateFire},
		// Only the latest missed slot: 11:00 and 10:00 stay missed.
		{name: "latest missed slot only", schedule: hourly, now: at(12, 5, 0), window: 86400, start: timer,
			wantKey: id + "#scheduled#2026-11-21T12:00:00Z", catchUp: true},
		{name: "slot before not-before never runs", schedule: hourly, now: at(12, 40, 0), window: 3600, notBefore: at(12, 10, 0), start: timer,
			wantSkip: KindNotBefore},
		{name: "a start not by the timer does not catch up", schedule: hourly, now: at(12, 40, 0), window: 3600, wantSkip: KindLateFire},
		{name: "a pending request still falls back", schedule: hourly, now: at(12, 40, 0), window: 3600, start: timer,
			req: &Request{ID: "42", At: at(12, 39, 0)}, wantKey: id + "#scheduled#2026-11-21T12:00:00Z", catchUp: true},
		{name: "minutely job, late fire in the window", schedule: minutely, now: at(12, 1, 50), window: 120, start: timer,
			wantKey: id + "#scheduled#2026-11-21T12:01:00Z", catchUp: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sched, err := schedule.ParseWithSeconds(tt.schedule, "UTC")
			if err != nil {
				t.Fatal(err)
			}
			spec := jobspec.Spec{ID: id, RandomizedDelaySec: 15, NotBefore: tt.notBefore, CatchUpWindowSec: tt.window, TimeoutSec: 3600}
			d := decideSlot(tt.now, sched, spec, tt.start, tt.req)
			if d.Skip != tt.wantSkip || (tt.wantSkip == "" && d.Key != tt.wantKey) {
				t.Fatalf("decision %+v, want key %q skip %q", d, tt.wantKey, tt.wantSkip)
			}
			if d.Skip != "" && d.Reason == "" {
				t.Error("a skip must say why")
			}
			if d.CatchUp != tt.catchUp {
				t.Errorf("catch-up %v, want %v", d.CatchUp, tt.catchUp)
			}
			if d.Trigger != wire.TriggerScheduled && d.Skip == "" {
				t.Errorf("trigger %q: a catch-up keeps the scheduled key and election", d.Trigger)
			}
			rec := recordFor(Env{Node: "n1"}, spec, d)
			if want := map[bool]string{true: "catchup", false: "scheduled"}[d.CatchUp]; d.Skip == "" && rec.Trigger != want {
				t.Errorf("record trigger %q, want %q", rec.Trigger, want)
			}
			if !d.CatchUp && d.Wait != 0 {
				t.Errorf("an on-time run waits %s", d.Wait)
			}
		})
	}
}

func TestCatchUpWait(t *testing.T) {
	slot := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	spec := func(id string, timeout int) jobspec.Spec { return jobspec.Spec{ID: id, TimeoutSec: timeout} }
	// The wait is every node's alike: a function of job and slot alone.
	if a, b := catchUpWait(spec(id, 3600), slot, time.Hour), catchUpWait(spec(id, 3600), slot, time.Hour); a != b {
		t.Fatalf("waits differ for the same job and slot: %s, %s", a, b)
	}
	for _, tt := range []struct {
		name      string
		timeout   int
		untilNext time.Duration
		limit     time.Duration // every wait is below it
	}{
		{"capped by the spread", 3600, time.Hour, CatchUpSpread},
		{"capped by a tenth of the timeout", 300, time.Hour, 30 * time.Second},
		{"capped by half the time to the next slot", 3600, 40 * time.Second, 20 * time.Second},
		{"no timeout known (older spec): no wait", 0, time.Hour, 0},
		{"next slot now: no wait", 3600, 0, 0},
		{"next slot under 2 ms away: no wait, no panic", 3600, 1500 * time.Microsecond, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var spread time.Duration
			for i := range 200 {
				id := "job-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				w := catchUpWait(spec(id, tt.timeout), slot, tt.untilNext)
				if w < 0 || (tt.limit == 0 && w != 0) || (tt.limit > 0 && w >= tt.limit) {
					t.Fatalf("wait %s for %s, want within [0, %s)", w, id, tt.limit)
				}
				spread = max(spread, w)
			}
			// 200 jobs coming back at once are spread, not started together.
			if tt.limit > 0 && spread < tt.limit/2 {
				t.Errorf("longest of 200 waits %s, want them spread over [0, %s)", spread, tt.limit)
			}
		})
	}
}

// A catch-up election is the slot's: a stamp showing the slot (the node
// that was up ran it on time) makes a node coming back stay silent.
func TestCatchUpOfAStampedSlotIsContention(t *testing.T) {
	slot := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	d := decision{Trigger: wire.TriggerScheduled, CatchUp: true, Slot: slot, Key: id + "#scheduled#2026-11-21T12:00:00Z"}
	if !(Stamp{Slot: slot}).covers(d) {
		t.Fatal("a stamp of the slot does not cover its catch-up")
	}
	if (Stamp{Slot: slot.Add(-time.Hour)}).covers(d) {
		t.Fatal("a stamp of the slot before covers the catch-up")
	}
}

// setupCatchUp is setupWith for an hourly job with a catch-up window of
// an hour, 40 minutes past the 12:00 slot, started by its timer, whose
// Sleep records the wait instead of sleeping.
func setupCatchUp(t *testing.T, command string, waited *[]time.Duration) (Env, string) {
	env, locks := setupWith(t, command, "0 0 * * * *", time.Date(2026, 11, 21, 12, 40, 0, 0, time.UTC))
	editSpec(t, env, func(s *jobspec.Spec) { s.CatchUpWindowSec, s.TimeoutSec, s.RandomizedDelaySec = 3600, 3600, 15 })
	env.Start = Start{ByTimer: true}
	env.Sleep = func(d time.Duration) bool { *waited = append(*waited, d); return true }
	return env, locks
}

// TestCatchUpRunsOnce: a slot missed by every node runs once as its
// catch-up (the command sees HOSTCRON_TRIGGER=catchup and the slot's own
// key), after the spread's wait; the next node's catch-up fire of the
// same slot is silent contention.
func TestCatchUpRunsOnce(t *testing.T) {
	var waited []time.Duration
	env, locks := setupCatchUp(t, `echo "$HOSTCRON_TRIGGER $HOSTCRON_RUN_KEY" >> out`, &waited)
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d, record %+v", code, record(t, env))
	}
	r := record(t, env)
	if r.Kind != KindRan || r.Trigger != "catchup" || r.RunKey != id+"#scheduled#2026-11-21T12:00:00Z" {
		t.Errorf("record %+v", r)
	}
	if len(waited) != 1 || waited[0] != catchUpWait(jobspec.Spec{ID: id, TimeoutSec: 3600}, r.Slot, 20*time.Minute) {
		t.Errorf("waited %v before contending", waited)
	}
	env.Node = "node2"
	if code := Run(env); code != ExitSkip {
		t.Fatalf("second catch-up of the slot: exit %d, want %d", code, ExitSkip)
	}
	if r := record(t, env); r.Kind != KindContention {
		t.Errorf("second catch-up record %+v", r)
	}
	out, err := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "catchup "+id+"#scheduled#2026-11-21T12:00:00Z\n"; got != want {
		t.Errorf("command ran %q, want once: %q", got, want)
	}
}

// TestCatchUpOfASlotRunOnTime: a node coming back after another ran the
// slot on time finds the stamp and runs nothing.
func TestCatchUpOfASlotRunOnTime(t *testing.T) {
	var waited []time.Duration
	env, locks := setupCatchUp(t, `echo ran >> out`, &waited)
	onTime := env
	onTime.Now = func() time.Time { return time.Date(2026, 11, 21, 12, 0, 9, 0, time.UTC) }
	if code := Run(onTime); code != 0 {
		t.Fatalf("on-time run: exit %d", code)
	}
	if r := record(t, onTime); r.Trigger != "scheduled" {
		t.Errorf("on-time record %+v", r)
	}
	env.Node = "node2"
	if code := Run(env); code != ExitSkip {
		t.Fatalf("catch-up of a slot run on time: exit %d, want %d", code, ExitSkip)
	}
	if b, _ := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "out")); string(b) != "ran\n" {
		t.Errorf("command ran %q, want once", b)
	}
}

// TestCatchUpStoppedWhileWaiting: a stop during the wait runs nothing and
// reports nothing (another node may still run the slot).
func TestCatchUpStoppedWhileWaiting(t *testing.T) {
	var waited []time.Duration
	env, locks := setupCatchUp(t, `echo ran >> out`, &waited)
	env.Sleep = func(time.Duration) bool { return false }
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d, want %d", code, ExitSkip)
	}
	if r := record(t, env); !Silent(r.Kind) {
		t.Errorf("record %+v: a stopped wait must be silent", r)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(locks), "www", "out")); err == nil {
		t.Error("the command ran")
	}
}

// TestCatchUpSIGTERMWhileWaiting: the node agent's SIGTERM (the job
// disabled, deleted or changed) during the real wait ends it: nothing runs,
// the record is silent, and the runner is not killed by the signal.
func TestCatchUpSIGTERMWhileWaiting(t *testing.T) {
	var waited []time.Duration
	env, locks := setupCatchUp(t, `echo ran >> out`, &waited)
	env.Sleep = nil // the real wait: at least seconds for this job and slot
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	start := time.Now()
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d, want %d", code, ExitSkip)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("the wait went on after SIGTERM")
	}
	if r := record(t, env); !Silent(r.Kind) {
		t.Errorf("record %+v: a stopped wait must be silent", r)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(locks), "www", "out")); err == nil {
		t.Error("the command ran")
	}
}

// TestCatchUpSIGTERMJustAfterTheWait: a SIGTERM that comes as the wait
// ends (the agent read the "started" record just before) is caught while
// the runner elects, and it runs nothing: silent, not killed, not counted.
func TestCatchUpSIGTERMJustAfterTheWait(t *testing.T) {
	var waited []time.Duration
	env, locks := setupCatchUp(t, `echo ran >> out`, &waited)
	env.Sleep = func(time.Duration) bool {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond) // the runtime hands it on
		return true
	}
	if code := Run(env); code != ExitSkip {
		t.Fatalf("exit %d, want %d", code, ExitSkip)
	}
	if r := record(t, env); !Silent(r.Kind) {
		t.Errorf("record %+v: a catch-up stopped before its command must be silent", r)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(locks), "www", "out")); err == nil {
		t.Error("the command ran")
	}
}

// TestCatchUpSIGTERMAfterRan: once the record says "ran", SIGTERM is a
// cancel as for any run: it reaches the command, which ends by it.
func TestCatchUpSIGTERMAfterRan(t *testing.T) {
	var waited []time.Duration
	env, _ := setupCatchUp(t, `kill -TERM $PPID; sleep 10`, &waited)
	if code := Run(env); code == 0 || code == ExitSkip {
		t.Fatalf("exit %d, want the command's signal", code)
	}
	if r := record(t, env); r.Kind != KindRan || r.Signal != "SIGTERM" {
		t.Errorf("record %+v: want a run ended by SIGTERM", r)
	}
}
