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
