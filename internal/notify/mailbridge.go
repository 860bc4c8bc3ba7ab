package notify

// REPLACED BY internal/notify/mail WHEN MERGED.
//
// These are local copies of the mail package's API (branch mail), which
// this branch cannot import yet. The fields are identical, so the merge
// replaces this whole file with aliases, and nothing else changes:
//
//	type (
//		MailEvent   = mail.Event
//		MailMessage = mail.Message
//		MailWindow  = mail.Window
//		MailDue     = mail.Due
//		MailPlan    = mail.Plan
//		MailPermanentError = mail.PermanentError
//	)
//	var (
//		PlanTenant   = mail.PlanTenant
//		RenderMail   = mail.Render
//		RenderDigest = mail.RenderDigest
//	)
//
// and core wires mail.Relay (it has Send(ctx, mail.Message) error) as the
// worker's Mailer.

import (
	"fmt"
	"strings"
	"time"
)

// MailEvent is mail.Event.
type MailEvent struct {
	ID                                                                                      int64
	Kind, TenantID, CronJobID, JobName, Schedule, RunKey, Result, FailureReason, OutputTail string
	At                                                                                      time.Time
	ConsecutiveFailures, MaxFailures                                                        int
}

// MailMessage is mail.Message.
type MailMessage struct{ To, Subject, Body, ID string }

// MailWindow is mail.Window: a tenant's rate window.
type MailWindow struct {
	Start time.Time
	Sent  int
}

// MailDue is mail.Due: one e-mail delivery due.
type MailDue struct {
	DeliveryID int64
	To         string
	Event      MailEvent
	Held       bool
}

// MailPlan is mail.Plan.
type MailPlan struct {
	Send      []MailDue
	Digests   map[string][]MailDue
	Hold      []MailDue
	HoldUntil time.Time
	Window    MailWindow
}

// PlanTenant is mail.PlanTenant. This stand-in sends while the window has
// room and holds the rest until the window ends; held ones come back as a
// digest per address (the real one is table-tested in the mail package).
var PlanTenant = func(now time.Time, w MailWindow, due []MailDue, limit int, period time.Duration) MailPlan {
	if now.Sub(w.Start) >= period || w.Start.IsZero() {
		w = MailWindow{Start: now}
	}
	p := MailPlan{HoldUntil: w.Start.Add(period)}
	for _, d := range due {
		switch {
		case w.Sent >= limit:
			p.Hold = append(p.Hold, d)
		case d.Held:
			if p.Digests == nil {
				p.Digests = map[string][]MailDue{}
			}
			if len(p.Digests[d.To]) == 0 {
				w.Sent++
			}
			p.Digests[d.To] = append(p.Digests[d.To], d)
		default:
			p.Send = append(p.Send, d)
			w.Sent++
		}
	}
	p.Window = w
	return p
}

// RenderMail is mail.Render.
var RenderMail = func(to string, e MailEvent) MailMessage {
	return MailMessage{To: to, ID: fmt.Sprintf("hostcron-event-%d", e.ID),
		Subject: fmt.Sprintf("[hostcron] %s: %s", e.Kind, e.JobName),
		Body:    fmt.Sprintf("%s of job %s (%s), run %s: %s %s\n", e.Kind, e.JobName, e.CronJobID, e.RunKey, e.Result, e.FailureReason)}
}

// RenderDigest is mail.RenderDigest.
var RenderDigest = func(to, tenantID string, events []MailEvent) MailMessage {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s %s %s %s\n", e.At.Format(time.RFC3339), e.Kind, e.JobName, e.RunKey)
	}
	return MailMessage{To: to, Subject: fmt.Sprintf("[hostcron] %d notifications", len(events)), Body: b.String(),
		ID: fmt.Sprintf("hostcron-digest-%s-%d", tenantID, events[0].ID)}
}

// MailPermanentError is mail.PermanentError: the relay refused a message
// for good (5xx); the delivery is not tried again.
type MailPermanentError struct{ Err error }

func (e *MailPermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *MailPermanentError) Unwrap() error { return e.Err }
