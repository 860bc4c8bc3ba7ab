package mail

import "time"

// Window is a tenant's mail budget window.
type Window struct {
	Start time.Time
	Sent  int // mails (single or digest) sent in this window
}

// Due is one e-mail delivery waiting to go out.
type Due struct {
	DeliveryID int64
	To         string
	Event      Event
	Held       bool // held earlier because the limit was hit
}

// Plan is what to do with a tenant's due e-mail deliveries now.
type Plan struct {
	Send      []Due            // each sent as its own mail
	Digests   map[string][]Due // address -> held deliveries folded into one digest mail
	Hold      []Due            // wait for the window to end (HoldUntil)
	HoldUntil time.Time        // zero when nothing is held
	Window    Window           // the tenant's window after the plan is carried out
}

// PlanTenant decides, for one tenant at now, given its window, its due
// deliveries (oldest first), the limit of mails per period: a window older than period
// starts afresh at now; held deliveries go out as one digest per address as soon as a window
// with budget is open (each digest costs one mail); then fresh deliveries go out one by one
// while budget remains; the rest are held until the window's end. limit <= 0 means no limit.
// A lost event is never a mail of its own: it is held to the window's end
// and goes out in the address's digest, so a platform outage that loses
// thousands of runs costs a tenant's inbox one digest per window, and its
// budget at most that one mail. The window's Sent counts mails planned;
// the caller gives back those it fails to send.
//
// Held deliveries are still folded into digests when there is no limit (the
// limit was lifted while they waited): a pile of held events is easier to
// read as one mail. A period <= 0 is treated as no limit, since a budget
// that never renews would hold mail forever. Plan.Hold keeps the input
// order; the caller marks those deliveries Held.
func PlanTenant(now time.Time, w Window, due []Due, limit int, period time.Duration) Plan {
	unlimited := limit <= 0 || period <= 0
	w = currentWindow(now, w, period)
	p := Plan{Digests: map[string][]Due{}}
	budget := func() bool { return unlimited || w.Sent < limit }

	held, order, fresh, lost := splitHeld(due)
	p.Hold = append(p.Hold, lost...)
	for _, addr := range order {
		if !budget() {
			p.Hold = append(p.Hold, held[addr]...)
			continue
		}
		p.Digests[addr] = held[addr]
		w.Sent++
	}
	for _, d := range fresh {
		if !budget() {
			p.Hold = append(p.Hold, d)
			continue
		}
		p.Send = append(p.Send, d)
		w.Sent++
	}
	if len(p.Hold) > 0 {
		p.HoldUntil = w.Start.Add(period)
	}
	p.Window = w
	return p
}

// currentWindow opens a new window at now when w has none or has run its
// period (or when now is before w.Start: a clock set back must not stretch
// the window, and so the hold, beyond one period from now).
func currentWindow(now time.Time, w Window, period time.Duration) Window {
	if w.Start.IsZero() || now.Before(w.Start) || now.Sub(w.Start) >= period {
		return Window{Start: now}
	}
	return w
}

// splitHeld separates held deliveries, grouped per address, from fresh
// ones, and fresh lost ones (held, never sent alone) from the rest. The addresses come in the order of their oldest held delivery (due
// is oldest first), so with little budget the longest-waiting address goes
// first; a map's order would be random and could starve one address.
func splitHeld(due []Due) (held map[string][]Due, order []string, fresh, lost []Due) {
	held = map[string][]Due{}
	for _, d := range due {
		if !d.Held && d.Event.Kind == KindLost {
			lost = append(lost, d)
			continue
		}
		if !d.Held {
			fresh = append(fresh, d)
			continue
		}
		if _, seen := held[d.To]; !seen {
			order = append(order, d.To)
		}
		held[d.To] = append(held[d.To], d)
	}
	return held, order, fresh, lost
}
