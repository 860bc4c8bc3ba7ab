package slots

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// t0 is a fixed base; hour(n) is n hours after it.
var t0 = time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC)

func hour(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }

func hours(ns ...int) []time.Time {
	var out []time.Time
	for _, n := range ns {
		out = append(out, hour(n))
	}
	return out
}

// active is a job created at hour 0 and provisioned at once, enabled.
var active = []Span{{From: hour(0), Enabled: TriYes, Provisioned: true}}

// states renders slots as "hour:state" (with "*" for off-schedule and the
// run's id), so a table row reads at a glance.
func states(slots []Slot) string {
	var parts []string
	for _, s := range slots {
		p := fmt.Sprintf("%s:%s", s.At.Sub(t0).Truncate(time.Minute), s.State)
		if s.Run != nil {
			p += fmt.Sprintf("#%d", s.Run.ID)
		}
		if s.OffSchedule {
			p += "*"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func TestClassify(t *testing.T) {
	swept := func(n int) *time.Time { t := hour(n); return &t }
	settle := 5 * time.Minute
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"every result maps to its state", Input{
			Fires: hours(1, 2, 3, 4, 5, 6, 7, 8, 9),
			Runs: []Run{{1, hour(1), wire.ResultSuccess}, {2, hour(2), wire.ResultExitCode}, {3, hour(3), wire.ResultSignal},
				{4, hour(4), wire.ResultTimeout}, {5, hour(5), wire.ResultOOM}, {6, hour(6), wire.ResultFailed},
				{7, hour(7), wire.ResultOverlapSkipped}, {8, hour(8), wire.ResultLost}, {9, hour(9), wire.ResultPlatformError}},
			Spans: active, SweptUntil: swept(9), Now: hour(20), Settle: settle},
			"1h0m0s:ran#1 2h0m0s:ran#2 3h0m0s:ran#3 4h0m0s:ran#4 5h0m0s:ran#5 6h0m0s:ran#6 7h0m0s:skipped_overlap#7 8h0m0s:lost#8 9h0m0s:platform_error#9"},
		{"cancelled, and a result this code does not know ran", Input{
			Fires: hours(1, 2), Runs: []Run{{1, hour(1), wire.ResultCancelled}, {2, hour(2), "future_result"}},
			Spans: active, SweptUntil: swept(2), Now: hour(20), Settle: settle},
			"1h0m0s:cancelled#1 2h0m0s:ran#2"},
		{"no record: swept past is unknown, beyond the sweep not yet swept, recent pending", Input{
			Fires: hours(1, 2, 3), Spans: active, SweptUntil: swept(1), Now: hour(3).Add(time.Minute), Settle: settle},
			"1h0m0s:unknown 2h0m0s:not_swept_yet 3h0m0s:pending"},
		{"sweep never started on a provisioned job: not swept yet", Input{
			Fires: hours(1), Spans: active, Now: hour(5), Settle: settle},
			"1h0m0s:not_swept_yet"},
		{"a slot exactly settle old is still pending; just past it is due", Input{
			Fires: []time.Time{hour(1), hour(1).Add(time.Second)}, Spans: active, Now: hour(1).Add(settle + time.Second),
			Settle: settle},
			"1h0m0s:not_swept_yet 1h0m0s:pending"},
		{"future slots are pending", Input{
			Fires: hours(5, 6), Spans: active, Now: hour(4), Settle: settle}, "5h0m0s:pending 6h0m0s:pending"},
		{"disabled interval, and disabled future slots", Input{
			Fires: hours(1, 2, 3, 4, 5, 6),
			Spans: []Span{{hour(0), TriYes, true}, {hour(2), TriNo, true}, {hour(4), TriYes, false},
				{hour(4).Add(time.Minute), TriYes, true}, {hour(5).Add(time.Minute), TriNo, true}},
			Runs: []Run{{1, hour(1), wire.ResultSuccess}}, SweptUntil: swept(1), Now: hour(5).Add(30 * time.Minute), Settle: settle},
			"1h0m0s:ran#1 2h0m0s:job_disabled 3h0m0s:job_disabled 4h0m0s:not_yet_provisioned 5h0m0s:not_swept_yet 6h0m0s:job_disabled"},
		{"a run recorded while disabled still shows (the node had not taken the disable yet)", Input{
			Fires: hours(1), Spans: []Span{{hour(0), TriNo, true}}, Runs: []Run{{4, hour(1), wire.ResultSuccess}},
			Now: hour(9), Settle: settle}, "1h0m0s:ran#4"},
		{"not yet provisioned until a provisioning; past slots of an unprovisioned job", Input{
			Fires:      hours(1, 2, 3, 4),
			Spans:      []Span{{hour(0), TriYes, false}, {hour(2).Add(time.Minute), TriYes, true}},
			SweptUntil: swept(2), Now: hour(10), Settle: settle},
			"1h0m0s:not_yet_provisioned 2h0m0s:not_yet_provisioned 3h0m0s:not_swept_yet 4h0m0s:not_swept_yet"},
		{"never provisioned: past not yet provisioned, future pending", Input{
			Fires: hours(1, 2), Spans: []Span{{hour(0), TriYes, false}}, Now: hour(1).Add(time.Hour / 2), Settle: settle},
			"1h0m0s:not_yet_provisioned 2h0m0s:pending"},
		{"a run proves provisioning: slots after it count", Input{
			Fires: hours(1, 2, 3), Spans: []Span{{hour(0), TriYes, false}},
			Runs: []Run{{7, hour(2), wire.ResultSuccess}}, Now: hour(10), Settle: settle},
			"1h0m0s:not_yet_provisioned 2h0m0s:ran#7 3h0m0s:not_swept_yet"},
		{"a run in a later span proves nothing for an earlier one", Input{
			Fires: hours(1, 3), Spans: []Span{{hour(0), TriYes, false}, {hour(2), TriNo, true}, {hour(2).Add(time.Minute), TriYes, false}},
			Runs: []Run{{7, hour(3), wire.ResultSuccess}}, Now: hour(10), Settle: settle},
			"1h0m0s:not_yet_provisioned 3h0m0s:ran#7"},
		{"enabled unknown: unknown, never invented", Input{
			Fires: hours(1), Spans: []Span{{hour(0), TriUnknown, true}}, Now: hour(10), Settle: settle},
			"1h0m0s:unknown"},
		{"before the trail: unknown", Input{
			Fires: hours(1), Spans: []Span{{hour(2), TriYes, true}}, Now: hour(10), Settle: settle},
			"1h0m0s:unknown"},
		{"a run off the current schedule is listed, flagged", Input{
			Fires: hours(2), Runs: []Run{{3, hour(1).Add(30 * time.Minute), wire.ResultLost}, {4, hour(2), wire.ResultSuccess}},
			Spans: active, Now: hour(10), Settle: settle},
			"1h30m0s:lost#3* 2h0m0s:ran#4"},
		{"a DST gap takes its place in time", Input{
			Fires: hours(0, 2), Gaps: []schedule.Gap{{Wall: "2026-03-20T01:30", At: hour(1)}},
			Runs: []Run{{1, hour(0), wire.ResultSuccess}, {2, hour(2), wire.ResultSuccess}}, Spans: active, Now: hour(10), Settle: settle},
			"0s:ran#1 1h0m0s:dst_gap 2h0m0s:ran#2"},
		{"nothing in range", Input{Spans: active, Now: hour(1)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Loc = time.UTC
			if got := states(Classify(tc.in)); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// Slots carry the wall time in the job's zone.
func TestClassifyWallTime(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC)
	got := Classify(Input{Loc: berlin, Fires: []time.Time{at}, Spans: active, Now: at.Add(time.Hour)})
	if len(got) != 1 || got[0].Wall != "2026-03-28T02:30:00" {
		t.Errorf("wall = %+v", got)
	}
}

// A slot with retries is read with each attempt, oldest record first: the
// slot takes its last attempt's state and run.
func TestClassifyTakesTheLastAttempt(t *testing.T) {
	at := hour(3)
	runs := []Run{{ID: 10, Slot: at, Result: wire.ResultExitCode}, {ID: 11, Slot: at, Result: wire.ResultTimeout}, {ID: 12, Slot: at, Result: wire.ResultSuccess}}
	got := Classify(Input{Loc: time.UTC, Fires: []time.Time{at}, Runs: runs, Spans: active, Now: at.Add(time.Hour)})
	if len(got) != 1 || got[0].Run == nil || got[0].Run.ID != 12 || got[0].State != Ran {
		t.Fatalf("slots %+v, want the one slot with its last attempt (record 12)", got)
	}
}

// ev builds an event at hour n.
func ev(n int, action string, opts ...func(*Event)) Event {
	e := Event{At: hour(n), Action: action}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func fields(f ...string) func(*Event) { return func(e *Event) { e.Fields = f } }
func nodes(n int) func(*Event)        { return func(e *Event) { e.Nodes = n } }
func status(s string) func(*Event)    { return func(e *Event) { e.Status = s } }
func enabled(b bool) func(*Event)     { return func(e *Event) { e.Enabled = &b } }

// spansString renders spans as "hour:enabled/provisioned" (y, n, ? and P, -).
func spansString(spans []Span) string {
	var parts []string
	for _, s := range spans {
		p := map[bool]string{true: "P", false: "-"}[s.Provisioned]
		parts = append(parts, fmt.Sprintf("%d:%s%s", int(s.From.Sub(t0).Hours()), "?yn"[s.Enabled:s.Enabled+1], p))
	}
	return strings.Join(parts, " ")
}

func TestSpansOf(t *testing.T) {
	prov := func(n int) Event { return ev(n, "provisioned", nodes(1), status("active")) }
	for _, tc := range []struct {
		name   string
		events []Event
		now    bool
		want   string
	}{
		{"create, provisioned", []Event{ev(0, "create"), prov(1)}, true, "0:y- 1:yP"},
		{"create recorded with enabled", []Event{ev(0, "create", enabled(true)), prov(1)}, false, "0:y- 1:yP"},
		{"a provisioning no node took proves nothing", []Event{ev(0, "create"),
			ev(1, "provisioned", nodes(0), status("failed")), ev(2, "provisioned", nodes(2), status("active"))}, true,
			"0:y- 1:y- 2:yP"},
		{"disable and enable: the enable waits for its provisioning", []Event{ev(0, "create"), prov(1),
			ev(2, "disable"), ev(3, "provisioned", nodes(1), status("disabled")), ev(4, "enable"), prov(5)}, true,
			"0:?- 1:?P 2:nP 3:nP 4:y- 5:yP"},
		{"a created-disabled job: updates that flip enabled are read back from now", []Event{ev(0, "create"),
			prov(1), ev(2, "update", fields("enabled")), prov(3), ev(4, "update", fields("command"))}, true,
			"0:n- 1:nP 2:y- 3:yP 4:yP"},
		{"schedule and zone changes wait for a provisioning; other edits keep it", []Event{ev(0, "create"), prov(1),
			ev(2, "update", fields("command", "timeout_seconds")), prov(3), ev(4, "update", fields("timezone")), prov(5),
			ev(6, "update", fields("schedule"))}, true,
			"0:y- 1:yP 2:yP 3:yP 4:y- 5:yP 6:y-"},
		{"auto-disable, retry enables", []Event{ev(0, "create", enabled(true)), prov(1), ev(2, "auto_disable"),
			ev(3, "retry"), prov(4)}, true, "0:y- 1:yP 2:nP 3:y- 4:yP"},
		{"retry of a failed job changes nothing", []Event{ev(0, "create", enabled(true)),
			ev(1, "provisioned", nodes(0), status("failed")), ev(2, "retry"), prov(3)}, true, "0:y- 1:y- 2:y- 3:yP"},
		{"auto-disable lifted by a late result", []Event{ev(0, "create", enabled(true)), prov(1), ev(2, "auto_disable"),
			ev(3, "auto_disable_lifted"), prov(4)}, true, "0:y- 1:yP 2:nP 3:y- 4:yP"},
		{"delete disables", []Event{ev(0, "create", enabled(true)), prov(1), ev(2, "delete")}, false, "0:y- 1:yP 2:nP"},
		{"run_now, cancel, requeued change nothing", []Event{ev(0, "create", enabled(true)), prov(1), ev(2, "run_now"),
			ev(3, "cancel"), ev(4, "requeued")}, true, "0:y- 1:yP 2:yP 3:yP 4:yP"},
		{"a pruned trail starts at creation, provisioned", []Event{ev(5, "disable"), ev(6, "enable"), prov(7)}, true,
			"-10:?P 5:nP 6:y- 7:yP"},
		{"a pruned trail with only edits: enabled from now", []Event{ev(5, "update", fields("command"))}, true,
			"-10:yP 5:yP"},
		{"no trail at all", nil, false, "-10:nP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spansString(SpansOf(tc.events, tc.now, hour(-10))); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestScheduleSince(t *testing.T) {
	created := hour(-10)
	for _, tc := range []struct {
		events []Event
		want   time.Time
	}{
		{[]Event{ev(0, "create")}, hour(0)},
		{[]Event{ev(0, "create"), ev(1, "update", fields("schedule")), ev(2, "update", fields("command"))}, hour(1)},
		{[]Event{ev(0, "create"), ev(1, "update", fields("timezone")), ev(2, "disable")}, hour(1)},
		{[]Event{ev(3, "disable")}, created},
		{nil, created},
	} {
		if got := ScheduleSince(tc.events, created); !got.Equal(tc.want) {
			t.Errorf("ScheduleSince(%v) = %v, want %v", tc.events, got, tc.want)
		}
	}
}
