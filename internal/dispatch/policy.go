package dispatch

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
)

// Backoff of a task whose send keeps failing.
const (
	firstRetry = time.Second
	maxRetry   = time.Minute
	// outageRetry is how soon tasks go again after Temporal was
	// unreachable; it does not grow, so recovery is noticed quickly.
	outageRetry = 2 * time.Second
)

// failure is what to do with a task whose send failed.
type failure struct {
	outage  bool          // Temporal unreachable: not the task's fault
	retryIn time.Duration // when the task is due again
}

// classify decides a failed send's fate from the error and how often the
// task failed before.
func classify(err error, attempts int) failure {
	if isOutage(err) {
		return failure{outage: true, retryIn: outageRetry}
	}
	return failure{retryIn: backoff(attempts)}
}

// backoff doubles from firstRetry per earlier failure, up to maxRetry.
func backoff(attempts int) time.Duration {
	d := firstRetry
	for i := 0; i < attempts && d < maxRetry; i++ {
		d *= 2
	}
	return min(d, maxRetry)
}

// isOutage reports errors that say Temporal itself is unreachable or
// overloaded rather than refusing this one task.
func isOutage(err error) bool {
	var unavailable *serviceerror.Unavailable
	var exhausted *serviceerror.ResourceExhausted
	var deadline *serviceerror.DeadlineExceeded
	return errors.As(err, &unavailable) || errors.As(err, &exhausted) || errors.As(err, &deadline) ||
		errors.Is(err, context.DeadlineExceeded)
}

// Reconnecting a lost listener: quickly at first (a restarted PostgreSQL
// is back in seconds), then no more often than every maxReconnect, while
// the dispatcher polls at DeafPoll.
const (
	firstReconnect = 250 * time.Millisecond
	maxReconnect   = 10 * time.Second
)

// reconnectDelay is the wait before the next attempt after failures
// attempts that did not reach a listening session.
func reconnectDelay(failures int) time.Duration {
	d := firstReconnect
	for i := 0; i < failures && d < maxReconnect; i++ {
		d *= 2
	}
	return min(d, maxReconnect)
}

// pollEvery is the fallback pass interval: slow while notifications
// arrive, as fast as before them while the listener is down.
func pollEvery(listening bool, poll, deafPoll time.Duration) time.Duration {
	if listening {
		return poll
	}
	return deafPoll
}

// earlier is the earlier of two times.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// healthChange is whether dispatch just paused or resumed.
type healthChange int

const (
	unchanged healthChange = iota
	nowPaused
	nowResumed
)

// outboxHealth tracks the two reasons dispatch is paused, so an outage is
// logged once when it starts and once when it ends. Each clears only on
// its own evidence: a claim that works says nothing about Temporal (a
// claim finds nothing while every task waits out an outage's retry), and
// a send that works nothing about the next claim.
type outboxHealth struct {
	claimFailing bool // the last claim failed (database, or a test hook)
	temporalDown bool // the last send that ended either way found Temporal unreachable
}

func (h *outboxHealth) paused() bool { return h.claimFailing || h.temporalDown }

// claimed records a claim's result.
func (h *outboxHealth) claimed(err error) healthChange {
	was := h.paused()
	h.claimFailing = err != nil
	return h.change(was)
}

// sent records a send's result; one given back for its own fault or left
// unsent says nothing about Temporal.
func (h *outboxHealth) sent(r sent) healthChange {
	was := h.paused()
	switch {
	case r.ok:
		h.temporalDown = false
	case r.outage != nil:
		h.temporalDown = true
	}
	return h.change(was)
}

func (h *outboxHealth) change(was bool) healthChange {
	switch now := h.paused(); {
	case now && !was:
		return nowPaused
	case was && !now:
		return nowResumed
	}
	return unchanged
}
