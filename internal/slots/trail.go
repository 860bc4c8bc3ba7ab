package slots

import (
	"slices"
	"time"
)

// Event is an audit-trail entry, as much as the spans need.
type Event struct {
	At     time.Time
	Action string
	Fields []string // update: the names of the fields it changed
	Nodes  int      // provisioned: how many nodes took the version
	Status string   // provisioned: the verdict
	// Enabled is a create's enabled, when its detail says (creates
	// recorded before the slots endpoint do not).
	Enabled *bool
}

// changesSchedule: the event gave the job the schedule it has from then
// on (fire times before it were another schedule's, which the trail does
// not keep: an update's detail names fields, not values).
func (e Event) changesSchedule() bool {
	return e.Action == "create" ||
		(e.Action == "update" && (slices.Contains(e.Fields, "schedule") || slices.Contains(e.Fields, "timezone")))
}

// ScheduleSince is when the job's current schedule and zone took effect:
// the newest create or update that set them. With none in the trail (it
// is pruned with run history) the schedule is older than the trail, and
// the job's creation is the bound.
func ScheduleSince(events []Event, createdAt time.Time) time.Time {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].changesSchedule() {
			return events[i].At
		}
	}
	return createdAt
}

// SpansOf derives from the trail (oldest first) when the job was enabled
// and when a node had its current schedule. enabledNow anchors the end:
// a create recorded without its enabled and updates that flip enabled
// are read backwards from it. What the trail cannot tell stays
// TriUnknown. A trail that does not start with the create (pruned) starts
// with a span from createdAt, provisioned: the job ran before the trail.
func SpansOf(events []Event, enabledNow bool, createdAt time.Time) []Span {
	en := enabledAfter(events, enabledNow)
	var out []Span
	if len(events) == 0 || events[0].Action != "create" {
		before := triOf(enabledNow)
		if len(events) > 0 {
			before = enabledBefore(events[0], en[0])
		}
		out = append(out, Span{From: createdAt, Enabled: before, Provisioned: true})
	}
	prov := len(out) > 0
	for i, e := range events {
		prev := TriUnknown
		switch {
		case i > 0:
			prev = en[i-1]
		case len(out) > 0:
			prev = out[0].Enabled
		}
		prov = provisionedAfter(e, prev, en[i], prov)
		out = append(out, Span{From: e.At, Enabled: en[i], Provisioned: prov})
	}
	return out
}

// enabledAfter is whether the job was enabled after each event: forward
// from what each event sets, then backward from enabledNow for what the
// forward pass could not tell.
func enabledAfter(events []Event, enabledNow bool) []Tri {
	en := make([]Tri, len(events))
	cur, auto := TriUnknown, false
	for i, e := range events {
		cur = enabledSet(e, cur, auto)
		auto = e.Action == "auto_disable" || (auto && cur != TriYes)
		en[i] = cur
	}
	cur = triOf(enabledNow)
	for i := len(events) - 1; i >= 0; i-- {
		if en[i] == TriUnknown {
			en[i] = cur
		}
		cur = enabledBefore(events[i], en[i])
	}
	return en
}

// enabledSet is the enabled an event leaves, given the one before it and
// whether the job stood auto-disabled.
func enabledSet(e Event, cur Tri, auto bool) Tri {
	switch e.Action {
	case "create":
		if e.Enabled != nil {
			return triOf(*e.Enabled)
		}
		return TriUnknown
	case "update":
		if slices.Contains(e.Fields, "enabled") {
			return cur.flip()
		}
	case "enable", "auto_disable_lifted":
		return TriYes
	case "disable", "delete", "auto_disable":
		return TriNo
	case "retry":
		if auto {
			return TriYes // a retry enables an auto-disabled job
		}
	}
	return cur
}

// enabledBefore is the enabled before an event that left `after`.
func enabledBefore(e Event, after Tri) Tri {
	switch e.Action {
	case "update":
		if slices.Contains(e.Fields, "enabled") {
			return after.flip()
		}
		return after
	case "create", "enable", "auto_disable_lifted", "disable", "delete", "auto_disable":
		return TriUnknown // it sets enabled whatever it was
	case "retry":
		if after == TriNo {
			return TriNo // a retry never disables
		}
		return TriUnknown // it may have enabled an auto-disabled job
	}
	return after
}

// provisionedAfter is whether a node had the job's current schedule,
// enabled, after an event. What restarts the sweep (rearms: a create, a
// change of schedule or zone, enabling a disabled job) waits for a
// provisioning that some node took; other changes keep the slots the
// nodes had.
func provisionedAfter(e Event, before, after Tri, prov bool) bool {
	switch e.Action {
	case "create":
		return false
	case "update":
		if e.changesSchedule() || (slices.Contains(e.Fields, "enabled") && after == TriYes) {
			return false
		}
	case "enable", "auto_disable_lifted", "retry":
		if before != TriYes && after == TriYes {
			return false
		}
	case "provisioned":
		return prov || e.Nodes > 0 || e.Status == "active"
	}
	return prov
}
