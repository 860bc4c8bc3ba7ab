// Package mail is the e-mail half of tenant notifications: it renders an
// outbox event (or a digest of held events) as a plain-text mail, sends it
// through the operator's SMTP relay, and decides, per tenant, which due
// deliveries go out now, which are folded into a digest and which wait for
// the next rate-limit window.
//
// The tenant controls much of what a mail shows (job names, failure reasons,
// the command's output), so everything tenant-made is treated as hostile:
// headers are built only from single-line, control-free text and subjects are
// RFC 2047 encoded, so no CR/LF can reach the header section; the body is
// quoted-printable, so long lines, bare CRs and a line holding only "." are
// carried intact; a recipient must be one plain address.
//
// The package keeps no state: the outbox worker (package notify) owns the
// deliveries and each tenant's Window, calls PlanTenant, renders and sends
// what the plan says and stores the new Window. See
// docs/notifications-mail.md.
package mail
