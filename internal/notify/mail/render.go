package mail

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Event kinds a tenant can subscribe to.
const (
	KindRunFailed      = "run_failed"
	KindRecovered      = "recovered"
	KindDisableWarning = "disable_warning"
	KindAutoDisabled   = "auto_disabled"
	KindLost           = "lost"
)

// Event is one notification as a mail shows it.
type Event struct {
	ID                  int64  // the outbox event's id: makes Message-ID stable across retries
	Kind                string // run_failed, recovered, disable_warning, auto_disabled, lost
	TenantID            string
	CronJobID           string
	JobName             string // may be empty
	Schedule            string
	RunKey              string // may be empty
	Result              string // may be empty
	FailureReason       string
	OutputTail          string    // may be empty; tenant text, up to 4 KiB
	At                  time.Time // the slot or the event's time
	ConsecutiveFailures int
	MaxFailures         int
	// An operator event (platform_error, node_not_converged,
	// slots_unrun) is about a shard, not a job: ShardID is set, and
	// Count and Examples summarise its aggregation window.
	ShardID   string
	ShardName string
	Count     int
	Examples  []string // one line each
}

// operator reports whether e is an operator (shard-level) event.
func (e Event) operator() bool { return e.ShardID != "" && e.CronJobID == "" }

// operatorSubject says what an operator event counts, on which shard.
func operatorSubject(e Event) string {
	shard := oneLine(cmpOr(e.ShardName, e.ShardID), subjectNameMax)
	switch e.Kind {
	case "platform_error":
		return fmt.Sprintf("Shard %q: %d platform errors", shard, e.Count)
	case "node_not_converged":
		return fmt.Sprintf("Shard %q: %d nodes not converged", shard, e.Count)
	case "slots_unrun":
		return fmt.Sprintf("Shard %q: %d scheduled runs went unrun", shard, e.Count)
	}
	return fmt.Sprintf("Shard %q: %s", shard, oneLine(e.Kind, 40))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Message is one mail.
type Message struct {
	To      string
	Subject string
	Body    string // text/plain; UTF-8
	// ID is the Message-ID without angle brackets. Render and RenderDigest
	// leave out the part after "@" ("hostcron-event-42"): Send completes it
	// with the domain of the relay's From address, so the ID is the same on
	// every core node and every retry, yet differs between two platforms
	// that both have an event 42 for the same person. An ID that already
	// holds an "@" is sent as it is.
	ID string
}

// Limits on what tenant text may take up in a mail.
const (
	subjectNameMax = 80   // runes of a job name in a subject
	fieldMax       = 500  // runes of a one-line body field
	outputTailMax  = 4096 // bytes of output shown (the outbox keeps 4 KiB)
	digestListMax  = 100  // events listed one by one in a digest
)

// Render is the mail for one event to address to.
func Render(to string, e Event) Message {
	return Message{
		To:      to,
		Subject: "[hostcron] " + subjectLine(e),
		Body:    eventBody(e),
		ID:      "hostcron-event-" + strconv.FormatInt(e.ID, 10),
	}
}

// RenderDigest is one mail that stands for several held events (the rate limit was hit).
func RenderDigest(to, tenantID string, events []Event) Message {
	return RenderDigestMore(to, tenantID, events, 0)
}

// RenderDigestMore is RenderDigest when more held events than events
// exist (a digest covers a bounded number): the digest counts and says
// "and N more" for them; they come in a later digest.
func RenderDigestMore(to, tenantID string, events []Event, more int) Message {
	total := len(events) + max(more, 0)
	return Message{
		To:      to,
		Subject: fmt.Sprintf("[hostcron] %d notifications held for %s", total, oneLine(tenantID, subjectNameMax)),
		Body:    digestBody(tenantID, events, max(more, 0)),
		ID:      digestID(events),
	}
}

// jobLabel names the job for a reader: its name, else its id.
func jobLabel(e Event, max int) string {
	if e.JobName != "" {
		return oneLine(e.JobName, max)
	}
	return oneLine(e.CronJobID, max)
}

// subjectLine says what happened in a few words; the kind decides the verb.
func subjectLine(e Event) string {
	if e.operator() {
		return operatorSubject(e)
	}
	job := `"` + jobLabel(e, subjectNameMax) + `"`
	switch e.Kind {
	case KindRunFailed:
		return "Job " + job + " failed"
	case KindRecovered:
		return "Job " + job + " recovered"
	case KindDisableWarning:
		return "Job " + job + " will be disabled after one more failure"
	case KindAutoDisabled:
		return "Job " + job + " was disabled after repeated failures"
	case KindLost:
		return "Job " + job + ": a run was lost"
	default:
		return "Job " + job + ": " + oneLine(e.Kind, 40)
	}
}

// explanation is the sentence that opens the body: what the event means
// for the tenant and what to do.
func explanation(e Event) string {
	if e.operator() {
		return "A shard-level fault of the platform (an operator notification): one mail per\n" +
			"shard, kind and 10-minute window, counting the occurrences known when it was sent."
	}
	switch e.Kind {
	case KindRunFailed:
		return "A run of this cron job failed."
	case KindRecovered:
		return "This cron job succeeded again after failing."
	case KindDisableWarning:
		return "This cron job failed again. One more failure in a row and it will be\n" +
			"disabled automatically. The end of the last run's output is below."
	case KindAutoDisabled:
		return "This cron job failed too many times in a row and has been disabled.\n" +
			"It will not run again until you enable it."
	case KindLost:
		return "No server reported a result for this run in time (for example the server\n" +
			"running it stopped). Whether the command ran is unknown."
	default:
		return "An event was recorded for this cron job."
	}
}

// eventBody lays out one event: explanation, the facts as "Label: value"
// lines, the output tail fenced so a reader sees where tenant text begins.
func eventBody(e Event) string {
	var b strings.Builder
	b.WriteString(explanation(e))
	b.WriteString("\n\n")
	writeFacts(&b, e)
	if e.OutputTail != "" {
		b.WriteString("\nEnd of the output:\n")
		b.WriteString("-----\n")
		tail := multiLine(lastBytes(e.OutputTail, outputTailMax))
		b.WriteString(tail)
		if !strings.HasSuffix(tail, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("-----\n")
	}
	b.WriteString(footerFor(e.operator()))
	return b.String()
}

const footer = "\n-- \nThis is an automatic message from hostcron. You receive it because\n" +
	"this address is subscribed to notifications for the job; change that\n" +
	"in the job's settings.\n"

const operatorFooter = "\n-- \nThis is an automatic message from hostcron. You receive it because\n" +
	"this address is an operator notification target (admin API,\n" +
	"/api/v1/admin/notification-targets).\n"

// footerFor is the footer of a tenant's mail, or an operator's.
func footerFor(operator bool) string {
	if operator {
		return operatorFooter
	}
	return footer
}

// writeFacts writes the event's fields, skipping empty ones.
func writeFacts(b *strings.Builder, e Event) {
	fact := func(label, value string) {
		if value != "" {
			fmt.Fprintf(b, "%-22s%s\n", label+":", oneLine(value, fieldMax))
		}
	}
	fact("Shard", e.ShardName)
	fact("Shard ID", e.ShardID)
	if e.Count > 0 {
		fact("Occurrences", strconv.Itoa(e.Count))
	}
	for _, x := range e.Examples {
		fact("Example", x)
	}
	fact("Job", e.JobName)
	fact("Job ID", e.CronJobID)
	fact("Account", e.TenantID)
	fact("Schedule", e.Schedule)
	if !e.At.IsZero() {
		fact("Time", e.At.UTC().Format(time.RFC3339))
	}
	fact("Run", e.RunKey)
	fact("Result", e.Result)
	fact("Reason", e.FailureReason)
	if e.ConsecutiveFailures > 0 {
		fact("Consecutive failures", failures(e))
	}
}

func failures(e Event) string {
	if e.MaxFailures > 0 {
		return fmt.Sprintf("%d of %d allowed", e.ConsecutiveFailures, e.MaxFailures)
	}
	return strconv.Itoa(e.ConsecutiveFailures)
}

// lastBytes keeps the end of s (the outbox already cuts it; this guards a
// caller that does not). A rune cut in half is repaired by multiLine.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// digestBody lists the held events one line each, oldest first; output
// tails are left out to keep a digest of a whole day's failures readable.
func digestBody(tenantID string, events []Event, more int) string {
	var b strings.Builder
	operator := len(events) > 0 && events[0].operator()
	if operator {
		fmt.Fprintf(&b, "The operator notification limit was reached, so %d notifications were\n"+
			"held and are summarised here: shard, kind and occurrences as known when held.\n\n", len(events)+more)
	} else {
		fmt.Fprintf(&b, "The notification limit for account %s was reached, so %d notifications\n"+
			"were held and are summarised here. Each job's run history has the details.\n\n",
			oneLine(tenantID, fieldMax), len(events)+more)
	}
	for i, e := range events {
		if i == digestListMax {
			break
		}
		b.WriteString(digestLine(e))
	}
	if n := len(events) - min(len(events), digestListMax) + more; n > 0 {
		fmt.Fprintf(&b, "... and %d more\n", n)
	}
	b.WriteString(footerFor(operator))
	return b.String()
}

func digestLine(e Event) string {
	at := "-"
	if !e.At.IsZero() {
		at = e.At.UTC().Format(time.RFC3339)
	}
	if e.operator() {
		return fmt.Sprintf("%s  %-18s shard %s  count=%d\n", at, oneLine(e.Kind, 40), oneLine(e.ShardName, subjectNameMax), e.Count)
	}
	line := fmt.Sprintf("%s  %-16s %s", at, oneLine(e.Kind, 40), jobLabel(e, subjectNameMax))
	if e.Result != "" {
		line += "  result=" + oneLine(e.Result, 40)
	}
	if e.FailureReason != "" {
		line += "  reason=" + oneLine(e.FailureReason, 200)
	}
	if t := lastLine(e.OutputTail, digestTailMax); t != "" {
		line += "  output=" + oneLine(t, digestTailMax)
	}
	return line + "\n"
}

// digestTailMax bounds the output a digest line carries (runes): the
// last line of a disable_warning's tail is usually the error.
const digestTailMax = 120

// lastLine is the last non-blank line of s, its last max runes.
func lastLine(s string, max int) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n\t "), "\n")
	r := []rune(strings.TrimSpace(lines[len(lines)-1]))
	if len(r) > max {
		r = r[len(r)-max:]
	}
	return string(r)
}

// digestID is derived from the set of event ids, so a digest retried with
// the same events keeps its Message-ID and one with other events does not.
func digestID(events []Event) string {
	ids := make([]int64, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	slices.Sort(ids)
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintf(h, "%d,", id)
	}
	return "hostcron-digest-" + hex.EncodeToString(h.Sum(nil)[:12])
}
