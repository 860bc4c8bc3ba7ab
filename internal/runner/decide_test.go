package runner

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestDecideSlot(t *testing.T) {
	at := func(h, m, s int) time.Time { return time.Date(2026, 11, 21, h, m, s, 0, time.UTC) }
	noon := "0 0 12 * * *"
	minutely := "0 * * * * *"
	req := &Request{ID: "42", At: at(14, 0, 0)}
	for _, tt := range []struct {
		name      string
		schedule  string
		tz        string
		now       time.Time
		delay     int
		notBefore time.Time
		req       *Request
		start     Start
		wantKey   string // "" when it skips
		wantSkip  string
		fallback  string // key of the fallback request, if any
	}{
		{name: "timely fire", schedule: noon, now: at(12, 0, 9), delay: 15, wantKey: id + "#scheduled#2026-11-21T12:00:00Z"},
		{name: "at the edge of delay + margin", schedule: noon, now: at(12, 0, 35), delay: 15, wantKey: id + "#scheduled#2026-11-21T12:00:00Z"},
		{name: "past the window", schedule: noon, now: at(12, 0, 36), delay: 15, wantSkip: KindLateFire},
		// Defect (a): a timer edited at 14:00 is restarted and fires at once.
		{name: "restarted timer runs no past slot", schedule: noon, now: at(14, 0, 0), delay: 15, wantSkip: KindLateFire},
		// Defect (b): a start queued behind an overrun comes after the window.
		{name: "start after an overrun", schedule: minutely, now: at(12, 1, 50), delay: 15, wantSkip: KindLateFire},
		{name: "slot before not-before", schedule: minutely, now: at(12, 1, 5), notBefore: at(12, 1, 3), wantSkip: KindNotBefore},
		{name: "slot at not-before", schedule: minutely, now: at(12, 1, 5), notBefore: at(12, 1, 0), wantKey: id + "#scheduled#2026-11-21T12:01:00Z"},
		{name: "request on a start that is no fire", schedule: noon, now: at(14, 0, 1), req: req, wantKey: id + "#manual#42"},
		{name: "request before not-before still runs", schedule: minutely, now: at(14, 0, 1), notBefore: at(14, 0, 30), req: req, wantKey: id + "#manual#42"},
		{name: "request never replaces a timely timer fire", schedule: minutely, now: at(14, 0, 1), req: req, start: Start{ByTimer: true},
			wantKey: id + "#scheduled#2026-11-21T14:00:00Z", fallback: id + "#manual#42"},
		{name: "request on a start not by the timer, inside a window", schedule: minutely, now: at(14, 0, 1), req: req, wantKey: id + "#manual#42"},
		// Defect (b): the timer elapsed while the previous run ran, and
		// systemd started the service when that run ended. Inside the
		// window the start still names its slot; the overlap marker the
		// other nodes left for that slot keeps it from running (see
		// TestOverlapIsOneDecisionPerSlot, node4). systemd 252's
		// TRIGGER_TIMER_REALTIME_USEC cannot tell: it keeps the timer's
		// first elapse for every later start (seen on the test nodes).
		{name: "start queued behind a run, inside the window", schedule: minutely, now: at(12, 1, 25), delay: 15,
			start: Start{ByTimer: true}, wantKey: id + "#scheduled#2026-11-21T12:01:00Z"},
		{name: "start queued behind a long run, outside the window", schedule: minutely, now: at(12, 1, 40), delay: 15,
			start: Start{ByTimer: true}, wantSkip: KindLateFire},
		{name: "expired request", schedule: noon, now: at(14, 6, 0), req: req, wantSkip: KindLateFire},
		{name: "request from the far future", schedule: noon, now: at(13, 0, 0), req: req, wantSkip: KindLateFire},
		// A timer re-armed in the second pass of Berlin's repeated hour fires
		// at 02:30 CET: the slot is the first pass's 02:30 CEST, over an hour
		// ago, so it never runs a second time.
		{name: "DST second pass", schedule: "0 30 2 * * *", tz: "Europe/Berlin", now: time.Date(2026, 10, 25, 1, 30, 5, 0, time.UTC), wantSkip: KindLateFire},
		{name: "DST first pass", schedule: "0 30 2 * * *", tz: "Europe/Berlin", now: time.Date(2026, 10, 25, 0, 30, 5, 0, time.UTC), wantKey: id + "#scheduled#2026-10-25T00:30:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tz := tt.tz
			if tz == "" {
				tz = "UTC"
			}
			sched, err := schedule.ParseWithSeconds(tt.schedule, tz)
			if err != nil {
				t.Fatal(err)
			}
			spec := jobspec.Spec{ID: id, RandomizedDelaySec: tt.delay, NotBefore: tt.notBefore}
			d := decideSlot(tt.now, sched, spec, tt.start, tt.req)
			if d.Skip != tt.wantSkip || (tt.wantSkip == "" && d.Key != tt.wantKey) {
				t.Fatalf("decision %+v, want key %q skip %q", d, tt.wantKey, tt.wantSkip)
			}
			if d.Skip != "" && d.Reason == "" {
				t.Error("a skip must say why")
			}
			switch {
			case tt.fallback == "" && d.Fallback != nil:
				t.Errorf("unexpected fallback %+v", d.Fallback)
			case tt.fallback != "" && (d.Fallback == nil || d.Fallback.Key != tt.fallback):
				t.Errorf("fallback %+v, want %q", d.Fallback, tt.fallback)
			}
		})
	}
}

func TestClassifyBusy(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 1, 5, 0, time.UTC)
	slot := decision{Trigger: wire.TriggerScheduled, Slot: now.Add(-5 * time.Second), Key: "k-slot"}
	manual := decision{Trigger: wire.TriggerManual, Request: "42", Key: "k-manual"}
	prev := now.Add(-65 * time.Second)
	for _, tt := range []struct {
		name string
		d    decision
		st   Stamp
		ok   bool
		want string
		bits string
	}{
		{"same slot: another node runs it", slot, Stamp{Slot: slot.Slot, Heartbeat: now}, true, KindContention, ""},
		{"older slot, live holder", slot, Stamp{Slot: prev, Holder: "node2", Heartbeat: now.Add(-3 * time.Second)}, true, KindOverlap, ""},
		{"released lease, lock held by someone without one", slot, Stamp{Slot: prev, Holder: "node2", Heartbeat: now.Add(-time.Hour), Released: true}, true, KindOverlap, ""},
		{"legacy stamp without lease", slot, Stamp{Slot: prev}, true, KindOverlap, ""},
		{"no stamp yet", slot, Stamp{}, false, KindOverlap, ""},
		{"holder stopped heart-beating", slot, Stamp{Slot: prev, Holder: "node2", RunKey: "k-prev", Heartbeat: now.Add(-2 * time.Minute)}, true,
			KindPlatformError, "lock holder node node2 stopped heart-beating at 2026-11-21T11:59:05Z"},
		// The lock is held by a fast node's run whose stamp lies ahead (not
		// ok), but this slot already ran there early: silent, no skip report.
		{"slot ran ahead on a fast node", slot, Stamp{Slot: now.Add(11 * time.Minute), Holder: "fast", RanAhead: []RanAhead{{Slot: slot.Slot, Node: "fast"}}}, false, KindContention, ""},
		{"same request held", manual, Stamp{Slot: prev, RunKey: "k-manual", Heartbeat: now}, true, KindContention, ""},
		{"request behind a scheduled run", manual, Stamp{Slot: prev, RunKey: "k-slot", Heartbeat: now}, true, KindOverlap, ""},
	} {
		b := classifyBusy(tt.d, tt.st, tt.ok, now)
		if b.Kind != tt.want || (tt.bits != "" && !strings.Contains(b.Reason, tt.bits)) {
			t.Errorf("%s: %+v, want %s %q", tt.name, b, tt.want, tt.bits)
		}
	}
}

func TestJudgeClock(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	boot := &clockoffset.Boot{ID: "b", Time: 100 * time.Hour}
	// reading measured `wall` before now by the wall clock and `elapsed`
	// before now by boot time.
	reading := func(offset, wall, elapsed time.Duration) *clockoffset.Reading {
		return &clockoffset.Reading{OffsetSeconds: offset.Seconds(), MeasuredAt: now.Add(-wall), BootID: "b", Boottime: boot.Time - elapsed}
	}
	for _, tt := range []struct {
		name    string
		reading *clockoffset.Reading
		boot    *clockoffset.Boot
		fresh   time.Duration
		want    clockState
		why     string
	}{
		{"in sync, young", reading(time.Second, time.Minute, time.Minute), boot, ClockVerifiedFresh, clockVerified, "1s off"},
		{"off, young", reading(time.Minute, time.Minute, time.Minute), boot, ClockVerifiedFresh, clockOff, "1m0s off"},
		{"none", nil, boot, ClockFresh, clockUnknown, "not measured"},
		{"aged by boot time, not by the wall clock", reading(0, time.Minute, 3*time.Minute), boot, ClockFresh, clockUnknown, "stepped by -2m0s"},
		{"stepped forward", reading(0, 5*time.Minute, time.Minute), boot, ClockFresh, clockUnknown, "stepped by 4m0s"},
		{"slewed within the tolerance", reading(0, time.Minute+ClockStepTolerance, time.Minute), boot, ClockVerifiedFresh, clockVerified, ""},
		{"just beyond the tolerance", reading(0, time.Minute+ClockStepTolerance+time.Millisecond, time.Minute), boot, ClockVerifiedFresh, clockUnknown, "stepped"},
		{"too old to verify", reading(0, ClockVerifiedFresh+time.Second, ClockVerifiedFresh+time.Second), boot, ClockVerifiedFresh, clockUnknown, "not within 2m0s"},
		{"young enough to forbid", reading(time.Hour, ClockVerifiedFresh+time.Second, ClockVerifiedFresh+time.Second), boot, ClockFresh, clockOff, "1h0m0s off"},
		{"another boot", &clockoffset.Reading{MeasuredAt: now.Add(-time.Minute), BootID: "a", Boottime: time.Hour}, boot, ClockFresh, clockUnknown, "before the node's last boot"},
		{"older agent", &clockoffset.Reading{MeasuredAt: now.Add(-time.Minute)}, boot, ClockFresh, clockUnknown, "no boot time"},
		{"boot time unreadable", reading(0, time.Minute, time.Minute), nil, ClockFresh, clockUnknown, "boot time is unreadable"},
		{"from boot time's future", reading(0, -time.Minute, -time.Minute), boot, ClockFresh, clockUnknown, "future"},
	} {
		got, why := judgeClock(tt.reading, now, tt.boot, tt.fresh)
		if got != tt.want || !strings.Contains(why, tt.why) {
			t.Errorf("%s: %v %q, want %v %q", tt.name, got, why, tt.want, tt.why)
		}
	}
}

func TestJudgeFutureStamp(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	boot := &clockoffset.Boot{ID: "b", Time: 100 * time.Hour}
	corrupt := Stamp{Slot: now.Add(11 * time.Minute)}
	lease := Stamp{Slot: now.Add(11 * time.Minute), Holder: "fast", RunKey: id + "#scheduled#2026-11-21T12:11:00Z", Clock: "unknown"}
	reading := func(offset time.Duration, age time.Duration) *clockoffset.Reading {
		return &clockoffset.Reading{OffsetSeconds: offset.Seconds(), MeasuredAt: now.Add(-age), BootID: "b", Boottime: boot.Time - age}
	}
	for _, tt := range []struct {
		name      string
		st        Stamp
		reading   *clockoffset.Reading
		overwrite bool
		remember  bool
		reason    string
	}{
		{"verified clock: the stamp is corrupt", corrupt, reading(400*time.Millisecond, time.Minute), true, false, ""},
		{"verified clock: a fast node's lease, its slot ran", lease, reading(400*time.Millisecond, time.Minute), true, true, ""},
		{"another job's lease is not this job's run", Stamp{Slot: lease.Slot, Holder: "x", RunKey: "other#scheduled#2026-11-21T12:11:00Z"}, reading(0, time.Minute), true, false, ""},
		{"verified at the bounds", corrupt, reading(-ClockVerified, ClockVerifiedFresh), true, false, ""},
		{"never measured: fail closed", corrupt, nil, false, false, "not measured"},
		{"measurement too old to verify", lease, reading(0, ClockVerifiedFresh+time.Second), false, false, "last measured at 2026-11-21T11:57:59Z (2m1s ago), not within 2m0s"},
		{"slow clock: the stamp may be correct", corrupt, reading(11*time.Minute, time.Minute), false, false, "this node's clock is 11m0s off the core API's"},
		{"slightly off, beyond verified", corrupt, reading(-ClockVerified-time.Second, time.Minute), false, false, "-11s off"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := judgeFutureStamp(tt.st, id, tt.reading, now, boot)
			if v.Overwrite != tt.overwrite || v.Remember != tt.remember || !strings.Contains(v.Reason, tt.reason) {
				t.Fatalf("%+v, want overwrite=%v remember=%v, reason with %q", v, tt.overwrite, tt.remember, tt.reason)
			}
			if !v.Overwrite && !strings.Contains(v.Reason, "2026-11-21T12:11:00Z") {
				t.Errorf("reason %q does not name the stamp", v.Reason)
			}
		})
	}
}

func TestMergeRanAhead(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	at := func(m int) RanAhead { return RanAhead{Slot: now.Add(time.Duration(m) * time.Minute), Node: "fast"} }
	keep := int(ranAheadKeep / time.Minute)
	slots := func(rs []RanAhead) []int {
		var out []int
		for _, r := range rs {
			out = append(out, int(r.Slot.Sub(now)/time.Minute))
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		old      []RanAhead
		add      *RanAhead // mergeRanAhead takes any number, nil ones skipped
		verified bool
		want     []int
	}{
		{"none", nil, nil, true, nil},
		{"adds, sorted", []RanAhead{at(12)}, &RanAhead{Slot: at(11).Slot, Node: "fast"}, false, []int{11, 12}},
		{"no duplicates", []RanAhead{at(11)}, &RanAhead{Slot: at(11).Slot}, false, []int{11}},
		// ranAheadKeep: a day's catch-up window plus an hour.
		{"a verified writer drops what is past ranAheadKeep", []RanAhead{at(-keep - 1), at(-keep + 1), at(11)}, nil, true, []int{-keep + 1, 11}},
		// A fast writer's now lies ahead: dropping by it could drop a slot
		// that has not yet come, which would then run a second time.
		{"an unverified writer drops nothing by age", []RanAhead{at(-61), at(11)}, nil, false, []int{-61, 11}},
	} {
		if got := slots(mergeRanAhead(tt.old, tt.verified, now, tt.add, nil)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	var many []RanAhead
	for m := range ranAheadMax + 5 {
		many = append(many, at(m))
	}
	if got := mergeRanAhead(many, false, now); len(got) != ranAheadMax || !got[0].Slot.Equal(at(5).Slot) {
		t.Errorf("bounded list: %d entries from %v, want %d from the 5th", len(got), got[0].Slot, ranAheadMax)
	}
}

func TestClockForbidsRun(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	boot := &clockoffset.Boot{ID: "b", Time: 100 * time.Hour}
	reading := func(offset, age time.Duration) *clockoffset.Reading {
		return &clockoffset.Reading{OffsetSeconds: offset.Seconds(), MeasuredAt: now.Add(-age), BootID: "b", Boottime: boot.Time - age}
	}
	for _, tt := range []struct {
		name    string
		reading *clockoffset.Reading
		why     string // "": runs
	}{
		{"never measured: runs (the core API may be down)", nil, ""},
		{"in sync", reading(time.Second, time.Minute), ""},
		{"off, within MaxSkew: runs, only future stamps are not overwritten", reading(5*time.Minute, time.Minute), ""},
		{"fast by more than MaxSkew", reading(-11*time.Minute, time.Minute), "this node's clock is -11m0s off the core API's"},
		{"slow by more than MaxSkew", reading(11*time.Minute, time.Minute), "11m0s off"},
		{"slow, measured 10 minutes ago: still forbids", reading(11*time.Minute, 10*time.Minute), "11m0s off"},
		{"far off but stale: unknown, runs", reading(11*time.Minute, ClockFresh+time.Second), ""},
		// NTP stepped it right since: the reading no longer holds.
		{"far off, stepped since: unknown, runs", &clockoffset.Reading{OffsetSeconds: 660, MeasuredAt: now.Add(-12 * time.Minute), BootID: "b", Boottime: boot.Time - time.Minute}, ""},
	} {
		if got := clockForbidsRun(tt.reading, now, boot); (tt.why == "") != (got == "") || !strings.Contains(got, tt.why) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.why)
		}
	}
}

// A backfill request runs its past slot as a request: its key and record
// name the slot it re-runs (HOSTCRON_SLOT), its election is the request's
// (never the slot stamp), and a request whose key is not this job's or
// names another request is a plain run-now of its id at most.
func TestDecideBackfill(t *testing.T) {
	now := time.Date(2026, 11, 21, 14, 0, 1, 0, time.UTC)
	past := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	sched, err := schedule.ParseWithSeconds("0 0 12 * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	spec := jobspec.Spec{ID: id, RandomizedDelaySec: 15}
	backfill := runkey.Backfill(id, past, "7")
	for _, tt := range []struct {
		name        string
		text        string
		start       Start
		wantKey     string
		wantSlot    time.Time
		wantRecord  wire.Trigger
		wantFallbck bool
	}{
		{name: "backfill on the agent's start", text: "7\n2026-11-21T14:00:00Z\n" + backfill + "\n",
			wantKey: backfill, wantSlot: past, wantRecord: wire.TriggerBackfill},
		{name: "run-now stays run-now", text: "7\n2026-11-21T14:00:00Z\n",
			wantKey: id + "#manual#7", wantSlot: time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC), wantRecord: wire.TriggerManual},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := parseRequest(tt.text)
			if req == nil {
				t.Fatalf("parseRequest(%q) = nil", tt.text)
			}
			d := decideSlot(now, sched, spec, tt.start, req)
			rec := recordFor(Env{Node: "n1"}, spec, d)
			if d.Skip != "" || d.Key != tt.wantKey || !d.Slot.Equal(tt.wantSlot) || rec.Trigger != string(tt.wantRecord) || d.Trigger != wire.TriggerManual {
				t.Fatalf("decision %+v record %+v, want key %q slot %s trigger %s elected as a request", d, rec, tt.wantKey, tt.wantSlot, tt.wantRecord)
			}
			env := runEnv(spec, rec)
			if !slices.Contains(env, "HOSTCRON_SLOT="+tt.wantSlot.Format(time.RFC3339)) || !slices.Contains(env, "HOSTCRON_TRIGGER="+string(tt.wantRecord)) {
				t.Errorf("runEnv = %v", env)
			}
		})
	}
	other := "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b11"
	// A backfill of another job is not run as this job's backfill.
	if d := decideSlot(now, sched, spec, Start{}, parseRequest("7\n2026-11-21T14:00:00Z\n"+runkey.Backfill(other, past, "7")+"\n")); d.Key == runkey.Backfill(other, past, "7") || d.Recorded == wire.TriggerBackfill {
		t.Errorf("another job's backfill decided as this job's: %+v", d)
	}
}

// Request files that do not parse are no request: a backfill's third line
// must be a backfill key naming the same request.
func TestParseRequest(t *testing.T) {
	past := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for _, bad := range []string{
		"", "7", "7\nyesterday\n", "a/b\n2026-11-21T14:00:00Z\n",
		"7\n2026-11-21T14:00:00Z\n" + runkey.Backfill(id, past, "8") + "\n", // another request's key
		"7\n2026-11-21T14:00:00Z\n" + runkey.Manual(id, "7") + "\n",         // not a backfill
		"7\n2026-11-21T14:00:00Z\n" + runkey.Scheduled(id, past) + "\n",     // a slot's own key
		"7\n2026-11-21T14:00:00Z\n" + runkey.Backfill(id, past, "7") + "\nx\n",
	} {
		if r := parseRequest(bad); r != nil {
			t.Errorf("parseRequest(%q) = %+v, want none", bad, r)
		}
	}
}

// A retry request runs attempt n of its slot as a request (elected by the
// id made of slot and attempt), with trigger retry and HOSTCRON_ATTEMPT n,
// only before the slot's next fire time: later it is a silent late fire,
// and a timer's fire that finds such a request runs its own slot without
// falling back to it.
func TestDecideRetry(t *testing.T) {
	sched, err := schedule.ParseWithSeconds("0 */10 * * * *", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	spec := jobspec.Spec{ID: id, RandomizedDelaySec: 15}
	slot := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	key := runkey.Retry(id, slot, 2)
	k, _ := runkey.Parse(key)
	at := func(m, s int) time.Time { return time.Date(2026, 11, 21, 12, m, s, 0, time.UTC) }
	for _, tt := range []struct {
		name     string
		now      time.Time
		start    Start
		wantKey  string
		wantSkip string
	}{
		{name: "before the next slot", now: at(1, 5), wantKey: key},
		{name: "just before the next slot", now: at(9, 59), wantKey: key},
		{name: "at the next slot", now: at(10, 0), wantSkip: KindLateFire},
		{name: "after the next slot", now: at(12, 0), wantSkip: KindLateFire},
		{name: "the next slot's fire finds a late retry", now: at(10, 3), start: Start{ByTimer: true}, wantKey: runkey.Scheduled(id, at(10, 0))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// The agent wrote the request a second ago.
			text := k.RequestID() + "\n" + tt.now.Add(-time.Second).Format(time.RFC3339) + "\n" + key + "\n"
			req := parseRequest(text)
			if req == nil {
				t.Fatalf("parseRequest(%q) = nil", text)
			}
			d := decideSlot(tt.now, sched, spec, tt.start, req)
			if d.Skip != tt.wantSkip || (tt.wantSkip == "" && d.Key != tt.wantKey) || d.Fallback != nil {
				t.Fatalf("decision %+v, want key %q skip %q and no fallback", d, tt.wantKey, tt.wantSkip)
			}
			if d.Skip != "" || d.Key != key {
				return
			}
			rec := recordFor(Env{Node: "n1"}, spec, d)
			env := runEnv(spec, rec)
			if d.Trigger != wire.TriggerManual || d.Request != k.RequestID() || rec.Trigger != "retry" || !d.Slot.Equal(slot) ||
				!slices.Contains(env, "HOSTCRON_ATTEMPT=2") || !slices.Contains(env, "HOSTCRON_SLOT=2026-11-21T12:00:00Z") {
				t.Errorf("decision %+v record %+v env %v", d, rec, env)
			}
		})
	}
	// A retry key under another request id is no retry.
	if r := parseRequest("retry-1-2\n2026-11-21T12:01:00Z\n" + key + "\n"); r != nil {
		t.Errorf("a retry key under another request id parsed: %+v", r)
	}
}

// A retry of a weekly job's slot more than wire.MaxRetryStart (+ the
// request TTL) after its slot runs nothing: its report would be refused
// as too old.
func TestDecideRetryTooOld(t *testing.T) {
	sched, err := schedule.ParseWithSeconds("0 0 12 * * 1", "UTC") // Mondays at noon
	if err != nil {
		t.Fatal(err)
	}
	spec := jobspec.Spec{ID: id}
	slot := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	key := runkey.Retry(id, slot, 2)
	k, _ := runkey.Parse(key)
	for _, tt := range []struct {
		after time.Duration
		runs  bool
	}{{wire.MaxRetryStart, true}, {wire.MaxRetryStart + RequestTTL + time.Second, false}} {
		now := slot.Add(tt.after)
		req := parseRequest(k.RequestID() + "\n" + now.Add(-time.Second).Format(time.RFC3339) + "\n" + key + "\n")
		d := decideSlot(now, sched, spec, Start{}, req)
		if (d.Skip == "") != tt.runs || (tt.runs && d.Key != key) {
			t.Errorf("%s after the slot: %+v, want runs=%v", tt.after, d, tt.runs)
		}
	}
}
