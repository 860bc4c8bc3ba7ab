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

func TestReconnectDelay(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{0, 250 * time.Millisecond},
		{1, 500 * time.Millisecond},
		{3, 2 * time.Second},
		{5, 8 * time.Second},
		{6, maxReconnect},
		{1000, maxReconnect},
	} {
		if got := reconnectDelay(tc.failures); got != tc.want {
			t.Errorf("reconnectDelay(%d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
}

func TestPollEvery(t *testing.T) {
	if got := pollEvery(true, 5*time.Second, 200*time.Millisecond); got != 5*time.Second {
		t.Errorf("listening: poll every %v, want the slow fallback", got)
	}
	if got := pollEvery(false, 5*time.Second, 200*time.Millisecond); got != 200*time.Millisecond {
		t.Errorf("deaf: poll every %v, want the fast poll", got)
	}
}

// TestOutboxHealth: each cause of a pause clears only on its own
// evidence, and a change is reported once.
func TestOutboxHealth(t *testing.T) {
	down := errors.New("down")
	type step struct {
		claimErr error // a claim's result, unless send is set
		send     *sent
		want     healthChange
	}
	claim := func(err error, want healthChange) step { return step{claimErr: err, want: want} }
	send := func(r sent, want healthChange) step { return step{send: &r, want: want} }
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"healthy stays quiet", []step{claim(nil, unchanged), send(sent{ok: true}, unchanged)}},
		{"database down and back", []step{claim(down, nowPaused), claim(down, unchanged), claim(nil, nowResumed)}},
		{"temporal down: an empty claim is no recovery", []step{
			send(sent{outage: down, retryIn: outageRetry}, nowPaused), claim(nil, unchanged),
			send(sent{retryIn: time.Second}, unchanged), send(sent{ok: true}, nowResumed)}},
		{"both down, one back", []step{
			claim(down, nowPaused), send(sent{outage: down}, unchanged), claim(nil, unchanged), send(sent{ok: true}, nowResumed)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h outboxHealth
			for i, s := range tc.steps {
				var got healthChange
				if s.send != nil {
					got = h.sent(*s.send)
				} else {
					got = h.claimed(s.claimErr)
				}
				if got != s.want {
					t.Errorf("step %d: %v, want %v", i, got, s.want)
				}
			}
		})
	}
}
