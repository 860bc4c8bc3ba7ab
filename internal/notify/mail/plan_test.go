package mail

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// fresh and held build deliveries whose event id is the delivery id.
func fresh(id int64, to string) Due { return Due{DeliveryID: id, To: to, Event: Event{ID: id}} }
func held(id int64, to string) Due {
	d := fresh(id, to)
	d.Held = true
	return d
}

// lost builds a delivery of a lost event (the platform's fault).
func lost(id int64, to string) Due {
	d := fresh(id, to)
	d.Event.Kind = KindLost
	return d
}

func ids(ds []Due) []int64 {
	out := []int64{}
	for _, d := range ds {
		out = append(out, d.DeliveryID)
	}
	return out
}

func digestIDs(p Plan) map[string][]int64 {
	out := map[string][]int64{}
	for a, ds := range p.Digests {
		out[a] = ids(ds)
	}
	return out
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPlanTenant(t *testing.T) {
	const hour = time.Hour
	for _, tt := range []struct {
		name        string
		now         time.Time
		w           Window
		due         []Due
		limit       int
		period      time.Duration
		wantSend    []int64
		wantDigests map[string][]int64
		wantHold    []int64
		wantUntil   time.Time
		wantWindow  Window
	}{
		{
			name: "under limit: all sent, window opened at now",
			now:  t0, due: []Due{fresh(1, "A"), fresh(2, "A")}, limit: 3, period: hour,
			wantSend: []int64{1, 2}, wantWindow: Window{Start: t0, Sent: 2},
		},
		{
			name: "up to the limit, the rest held until the window ends",
			now:  t0.Add(10 * time.Minute), w: Window{Start: t0, Sent: 1},
			due: []Due{fresh(1, "A"), fresh(2, "A"), fresh(3, "B"), fresh(4, "A")}, limit: 3, period: hour,
			wantSend: []int64{1, 2}, wantHold: []int64{3, 4}, wantUntil: t0.Add(hour),
			wantWindow: Window{Start: t0, Sent: 3},
		},
		{
			name: "at the limit: nothing sent",
			now:  t0.Add(59 * time.Minute), w: Window{Start: t0, Sent: 3},
			due: []Due{fresh(5, "A")}, limit: 3, period: hour,
			wantHold: []int64{5}, wantUntil: t0.Add(hour), wantWindow: Window{Start: t0, Sent: 3},
		},
		{
			name: "held stay held in the same window",
			now:  t0.Add(30 * time.Minute), w: Window{Start: t0, Sent: 3},
			due: []Due{held(3, "A"), held(4, "A"), fresh(5, "A")}, limit: 3, period: hour,
			wantHold: []int64{3, 4, 5}, wantUntil: t0.Add(hour), wantWindow: Window{Start: t0, Sent: 3},
		},
		{
			name: "held go out as one digest after the window rolls over",
			now:  t0.Add(hour), w: Window{Start: t0, Sent: 3},
			due: []Due{held(3, "A"), held(4, "A"), held(5, "A")}, limit: 3, period: hour,
			wantDigests: map[string][]int64{"A": {3, 4, 5}},
			wantWindow:  Window{Start: t0.Add(hour), Sent: 1},
		},
		{
			name: "one digest per address, in order of the oldest held",
			now:  t0.Add(2 * hour), w: Window{Start: t0, Sent: 3},
			due: []Due{held(3, "B"), held(4, "A"), held(5, "B"), held(6, "A")}, limit: 3, period: hour,
			wantDigests: map[string][]int64{"A": {4, 6}, "B": {3, 5}},
			wantWindow:  Window{Start: t0.Add(2 * hour), Sent: 2},
		},
		{
			name: "digests cost budget: the address waiting longest goes first",
			now:  t0.Add(hour), w: Window{Start: t0, Sent: 1},
			due: []Due{held(3, "B"), held(4, "A"), held(5, "C"), fresh(6, "A")}, limit: 2, period: hour,
			wantDigests: map[string][]int64{"B": {3}, "A": {4}},
			wantHold:    []int64{5, 6}, wantUntil: t0.Add(2 * hour),
			wantWindow: Window{Start: t0.Add(hour), Sent: 2},
		},
		{
			name: "fresh ones after the digests while budget remains",
			now:  t0.Add(hour + time.Minute), w: Window{Start: t0, Sent: 9},
			due: []Due{held(3, "A"), held(4, "B"), fresh(5, "A"), fresh(6, "B"), fresh(7, "A")}, limit: 4, period: hour,
			wantDigests: map[string][]int64{"A": {3}, "B": {4}},
			wantSend:    []int64{5, 6}, wantHold: []int64{7}, wantUntil: t0.Add(2*hour + time.Minute),
			wantWindow: Window{Start: t0.Add(hour + time.Minute), Sent: 4},
		},
		{
			name: "limit 0: no limit, held still folded into a digest",
			now:  t0.Add(time.Minute), w: Window{Start: t0, Sent: 500},
			due: []Due{held(1, "A"), held(2, "A"), fresh(3, "A"), fresh(4, "B")}, limit: 0, period: hour,
			wantDigests: map[string][]int64{"A": {1, 2}}, wantSend: []int64{3, 4},
			wantWindow: Window{Start: t0, Sent: 503},
		},
		{
			name: "negative limit is no limit too",
			now:  t0, due: []Due{fresh(1, "A"), fresh(2, "A")}, limit: -1, period: hour,
			wantSend: []int64{1, 2}, wantWindow: Window{Start: t0, Sent: 2},
		},
		{
			name: "period 0 cannot renew a budget: no limit",
			now:  t0, w: Window{Start: t0, Sent: 5}, due: []Due{fresh(1, "A")}, limit: 1, period: 0,
			wantSend: []int64{1}, wantWindow: Window{Start: t0, Sent: 1},
		},
		{
			name: "nothing due: the window is still brought up to date",
			now:  t0.Add(3 * hour), w: Window{Start: t0, Sent: 3}, limit: 3, period: hour,
			wantWindow: Window{Start: t0.Add(3 * hour)},
		},
		{
			name: "a window starting after now (clock set back) starts afresh",
			now:  t0, w: Window{Start: t0.Add(time.Hour), Sent: 3}, due: []Due{fresh(1, "A")}, limit: 3, period: hour,
			wantSend: []int64{1}, wantWindow: Window{Start: t0, Sent: 1},
		},
		{
			name: "lost is never a mail of its own: held to the window's end, even with budget",
			now:  t0.Add(10 * time.Minute), w: Window{Start: t0, Sent: 0},
			due: []Due{lost(1, "A"), fresh(2, "A"), lost(3, "B")}, limit: 3, period: hour,
			wantSend: []int64{2}, wantHold: []int64{1, 3}, wantUntil: t0.Add(hour),
			wantWindow: Window{Start: t0, Sent: 1},
		},
		{
			name: "lost does not eat the budget fresh failures need",
			now:  t0, due: []Due{lost(1, "A"), lost(2, "A"), fresh(3, "A")}, limit: 1, period: hour,
			wantSend: []int64{3}, wantHold: []int64{1, 2}, wantUntil: t0.Add(hour), wantWindow: Window{Start: t0, Sent: 1},
		},
		{
			name: "held lost deliveries join the address's digest: one mail for the whole outage",
			now:  t0.Add(hour), w: Window{Start: t0, Sent: 3},
			due: []Due{held(1, "A"), func() Due { d := lost(2, "A"); d.Held = true; return d }(),
				func() Due { d := lost(3, "B"); d.Held = true; return d }()}, limit: 3, period: hour,
			wantDigests: map[string][]int64{"A": {1, 2}, "B": {3}}, wantWindow: Window{Start: t0.Add(hour), Sent: 2},
		},
		{
			name: "every-minute failures: a day is bounded by the limit",
			now:  t0.Add(30 * time.Second), w: Window{Start: t0, Sent: 0},
			due: []Due{fresh(1, "A"), fresh(2, "A"), fresh(3, "A")}, limit: 1, period: 24 * hour,
			wantSend: []int64{1}, wantHold: []int64{2, 3}, wantUntil: t0.Add(24 * hour),
			wantWindow: Window{Start: t0, Sent: 1},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanTenant(tt.now, tt.w, tt.due, tt.limit, tt.period)
			if got := ids(p.Send); !equalIDs(got, orEmpty(tt.wantSend)) {
				t.Errorf("Send %v, want %v", got, tt.wantSend)
			}
			if got := ids(p.Hold); !equalIDs(got, orEmpty(tt.wantHold)) {
				t.Errorf("Hold %v, want %v", got, tt.wantHold)
			}
			gotD := digestIDs(p)
			if len(gotD) != len(tt.wantDigests) {
				t.Errorf("Digests %v, want %v", gotD, tt.wantDigests)
			}
			for a, want := range tt.wantDigests {
				if !equalIDs(gotD[a], want) {
					t.Errorf("Digests[%s] %v, want %v", a, gotD[a], want)
				}
			}
			if !p.HoldUntil.Equal(tt.wantUntil) {
				t.Errorf("HoldUntil %v, want %v", p.HoldUntil, tt.wantUntil)
			}
			if !p.Window.Start.Equal(tt.wantWindow.Start) || p.Window.Sent != tt.wantWindow.Sent {
				t.Errorf("Window %+v, want %+v", p.Window, tt.wantWindow)
			}
			// Every due delivery lands in exactly one place.
			if n := len(p.Send) + len(p.Hold) + countDigested(p); n != len(tt.due) {
				t.Errorf("plan places %d deliveries, %d were due", n, len(tt.due))
			}
		})
	}
}

func orEmpty(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func countDigested(p Plan) int {
	n := 0
	for _, ds := range p.Digests {
		n += len(ds)
	}
	return n
}

// A day of a job failing every minute, planned the way the outbox would
// (held deliveries come back marked Held), sends at most limit mails per
// window and loses no event.
func TestPlanTenantDayOfFailures(t *testing.T) {
	const limit = 10
	var (
		w       Window
		pending []Due
		mails   int
		events  int
	)
	for m := range 24 * 60 {
		now := t0.Add(time.Duration(m) * time.Minute)
		pending = append(pending, fresh(int64(m), "A"))
		p := PlanTenant(now, w, pending, limit, time.Hour)
		mails += len(p.Send) + len(p.Digests)
		events += len(p.Send) + countDigested(p)
		if p.Window.Sent > limit {
			t.Fatalf("minute %d: window holds %d mails", m, p.Window.Sent)
		}
		w = p.Window
		pending = pending[:0]
		for _, d := range p.Hold {
			d.Held = true
			pending = append(pending, d)
		}
	}
	if mails > 24*limit {
		t.Errorf("%d mails in a day, want at most %d", mails, 24*limit)
	}
	if events+len(pending) != 24*60 {
		t.Errorf("%d events mailed and %d pending, want %d in all", events, len(pending), 24*60)
	}
}
