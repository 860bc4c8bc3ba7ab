package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		attempts int
		want     failure
	}{
		{"temporal unavailable", fmt.Errorf("signal: %w", serviceerror.NewUnavailable("connection refused")), 7, failure{outage: true, retryIn: outageRetry}},
		{"send timed out", fmt.Errorf("signal: %w", context.DeadlineExceeded), 3, failure{outage: true, retryIn: outageRetry}},
		{"overloaded", serviceerror.NewResourceExhausted(0, "busy"), 0, failure{outage: true, retryIn: outageRetry}},
		{"task refused, first failure", serviceerror.NewInvalidArgument("bad"), 0, failure{retryIn: time.Second}},
		{"task refused, third failure", errors.New("boom"), 2, failure{retryIn: 4 * time.Second}},
		{"backoff is capped", errors.New("boom"), 40, failure{retryIn: maxRetry}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err, tc.attempts); got != tc.want {
				t.Errorf("classify = %+v, want %+v", got, tc.want)
			}
		})
	}
}
