// Package notify holds the pure decisions of tenant notifications: which
// events a recorded run emits (EventsFor), when a failed delivery is tried
// again (Backoff, Classify),
// how a webhook body is signed (Sign, Verify) and which addresses and URLs
// a webhook may reach (CheckURL, AllowedIP). It imports neither the store
// nor the network: the store calls EventsFor inside the transaction that
// records the run, and internal/notify/worker delivers.
package notify

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Kind is an event a tenant can subscribe a target to.
type Kind string

const (
	RunFailed      Kind = "run_failed"      // a counted failure was recorded
	Recovered      Kind = "recovered"       // the first success after failures
	DisableWarning Kind = "disable_warning" // one more failure disables the job
	AutoDisabled   Kind = "auto_disabled"   // this failure disabled the job
	Lost           Kind = "lost"            // the sweeper recorded a lost run
)

// Kinds are all kinds, in the order they are documented.
var Kinds = []Kind{RunFailed, Recovered, DisableWarning, AutoDisabled, Lost}

// Recorded is what recording one outcome did, as EventsFor needs it.
type Recorded struct {
	Duplicate bool        // the run key was known: nothing was recorded
	Result    wire.Result // the recorded result
	// Failure is store.IsFailure(Result): the tenant's failure, the only
	// kind the counter counts (platform_error, lost and overlap skips are
	// not). The caller passes it because the store imports this package.
	Failure      bool
	PrevFailures int  // the job's counter before the outcome
	Failures     int  // the counter after the recount
	MaxFailures  int  // the job's threshold (0: never disables)
	AutoDisabled bool // this outcome tripped the auto-disable
	// Retried: the failure is an attempt the core queued a retry of; it
	// notifies nothing (the slot's last attempt does).
	Retried bool
}

// EventsFor is the kinds one recorded outcome emits, in a fixed order. A
// duplicate emits nothing (a redelivery must not notify twice); a
// platform fault is not the tenant's failure and emits nothing either. The
// warning comes when the counter reaches max_failures-1 by a failure, so
// a threshold of 1 (no room for a warning) or 0 (never disables) has none.
func EventsFor(r Recorded) []Kind {
	if r.Duplicate || (r.Failure && r.Retried) {
		return nil
	}
	var out []Kind
	switch {
	case r.Failure:
		out = append(out, RunFailed)
		if r.MaxFailures > 1 && r.Failures == r.MaxFailures-1 && r.Failures > r.PrevFailures {
			out = append(out, DisableWarning)
		}
		if r.AutoDisabled {
			out = append(out, AutoDisabled)
		}
	case r.Result == wire.ResultSuccess && r.PrevFailures > 0 && r.Failures == 0:
		out = append(out, Recovered)
	}
	return out
}

// Retry policy of a delivery.
const (
	BackoffBase = 10 * time.Second
	BackoffCap  = time.Hour
	MaxAttempts = 12 // then the delivery is failed
)

// Backoff is the wait before attempt+1 after attempt (1-based) failed:
// exponential from BackoffBase, capped at BackoffCap, with "equal jitter"
// (half fixed, half scaled by rnd in [0,1)), so receivers that came back
// are not hit by every core at once yet the wait never collapses to 0.
func Backoff(attempt int, rnd float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(BackoffBase) * math.Pow(2, float64(attempt-1))
	if d > float64(BackoffCap) {
		d = float64(BackoffCap)
	}
	rnd = math.Min(math.Max(rnd, 0), 1)
	return time.Duration(d/2 + d/2*rnd)
}

// Verdict is what an attempt's outcome means for the delivery.
type Verdict int

const (
	Delivered Verdict = iota
	Retry
	Permanent // never tried again: the receiver refused it for good
)

// Classify turns an HTTP status (0: no response: a network error, a
// refused address, a redirect) into a verdict: 2xx delivered; 410 Gone,
// the one answer that says the endpoint is gone for good, permanent;
// anything else retried until MaxAttempts. A 4xx is retried too: a
// receiver answers 404 while it is being deployed, or 401 to a
// signature whose timestamp a skewed clock put outside its window, and
// neither should cost the tenant the event.
func Classify(status int) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Delivered
	case status == http.StatusGone:
		return Permanent
	}
	return Retry
}

// Next is the state a delivery moves to after a failed attempt (attempts
// counting it): pending again after Backoff, or failed for good.
func Next(v Verdict, attempts int, rnd float64) (state string, retryIn time.Duration) {
	if v == Permanent || attempts >= MaxAttempts {
		return StateFailed, 0
	}
	return StatePending, Backoff(attempts, rnd)
}

// Delivery states.
const (
	StatePending   = "pending"
	StateHeld      = "held" // an e-mail waiting for its tenant's rate window
	StateDelivered = "delivered"
	StateFailed    = "failed"
)

// maxErrorBytes bounds a delivery's last_error: it is shown through the
// API.
const maxErrorBytes = 500

// Truncate makes an error text a delivery's last_error: at most
// maxErrorBytes, and valid UTF-8 (PostgreSQL refuses text that is not, and
// a receiver's status line or a cut inside a character would make the
// attempt unrecordable).
func Truncate(s string) string {
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes]
	}
	return strings.ToValidUTF8(s, "")
}

// MaxTailBytes bounds the output tail a disable_warning carries.
const MaxTailBytes = 4 << 10

// Tail joins a run's output lines, oldest first, into the tail a
// disable_warning carries: the last lines that fit in max bytes (the end
// of the output is what tells why it failed), cut at a line boundary
// where one fits at all.
func Tail(lines []string, max int) string {
	var out []string
	size := 0
	for i := len(lines) - 1; i >= 0; i-- {
		n := len(lines[i]) + 1
		if size+n > max {
			if len(out) == 0 { // one long line: its end
				l := lines[i]
				return l[len(l)-max:]
			}
			break
		}
		out = append(out, lines[i])
		size += n
	}
	slices.Reverse(out)
	return strings.Join(out, "\n")
}
