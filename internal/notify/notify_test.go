package notify

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestEventsFor(t *testing.T) {
	fail := func(prev, now, max int, disabled bool) Recorded {
		return Recorded{Result: wire.ResultExitCode, Failure: true, PrevFailures: prev, Failures: now, MaxFailures: max, AutoDisabled: disabled}
	}
	cases := []struct {
		name string
		r    Recorded
		want []Kind
	}{
		{"first failure of 3", fail(0, 1, 3, false), []Kind{RunFailed}},
		{"warning at max-1", fail(1, 2, 3, false), []Kind{RunFailed, DisableWarning}},
		{"trip", fail(2, 3, 3, true), []Kind{RunFailed, AutoDisabled}},
		{"max 1 has no warning", fail(0, 1, 1, true), []Kind{RunFailed, AutoDisabled}},
		{"max 2 warns at 1", fail(0, 1, 2, false), []Kind{RunFailed, DisableWarning}},
		{"max 0 never warns", fail(0, 0, 0, false), []Kind{RunFailed}},
		{"counter unchanged at max-1: no second warning", fail(2, 2, 3, false), []Kind{RunFailed}},
		{"failure after the disable", fail(3, 4, 3, false), []Kind{RunFailed}},
		{"duplicate", Recorded{Duplicate: true, Result: wire.ResultExitCode, Failure: true, Failures: 2, MaxFailures: 3}, nil},
		{"recovered", Recorded{Result: wire.ResultSuccess, PrevFailures: 2}, []Kind{Recovered}},
		{"success after success", Recorded{Result: wire.ResultSuccess}, nil},
		{"older success leaves the streak", Recorded{Result: wire.ResultSuccess, PrevFailures: 2, Failures: 2}, nil},
		{"platform error", Recorded{Result: wire.ResultPlatformError, PrevFailures: 1, Failures: 1, MaxFailures: 3}, nil},
		{"overlap skipped", Recorded{Result: wire.ResultOverlapSkipped, PrevFailures: 1, Failures: 1, MaxFailures: 3}, nil},
		{"lost outcome", Recorded{Result: wire.ResultLost, PrevFailures: 1, Failures: 1, MaxFailures: 3}, nil},
		{"a failed attempt with a retry queued", Recorded{Result: wire.ResultExitCode, Failure: true, Retried: true, PrevFailures: 1, Failures: 1, MaxFailures: 3}, nil},
		{"the last attempt's failure", fail(1, 2, 3, false), []Kind{RunFailed, DisableWarning}},
	}
	for _, c := range cases {
		if got := EventsFor(c.r); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		attempt  int
		rnd      float64
		min, max time.Duration
	}{
		{1, 0, 5 * time.Second, 5 * time.Second},
		{1, 1, 10 * time.Second, 10 * time.Second},
		{2, 0.5, 15 * time.Second, 15 * time.Second},
		{0, 0, 5 * time.Second, 5 * time.Second},
		{12, 0.999, 30 * time.Minute, time.Hour},
		{40, 1, time.Hour, time.Hour},
		{3, -1, 20 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		if got := Backoff(c.attempt, c.rnd); got < c.min || got > c.max {
			t.Errorf("Backoff(%d, %v) = %v, want in [%v, %v]", c.attempt, c.rnd, got, c.min, c.max)
		}
	}
}

func TestClassifyAndNext(t *testing.T) {
	cases := []struct {
		status   int
		attempts int
		verdict  Verdict
		state    string
	}{
		{200, 1, Delivered, ""},
		{204, 1, Delivered, ""},
		{0, 1, Retry, StatePending},
		{301, 1, Retry, StatePending},
		{408, 1, Retry, StatePending},
		{429, 1, Retry, StatePending},
		{500, 1, Retry, StatePending},
		{503, MaxAttempts, Retry, StateFailed},
		// Review: a receiver answering 4xx during a deploy, or refusing the
		// signature for a clock off by minutes, must not lose the event.
		{400, 1, Retry, StatePending},
		{401, 1, Retry, StatePending},
		{403, 1, Retry, StatePending},
		{404, 1, Retry, StatePending},
		{404, MaxAttempts, Retry, StateFailed},
		{410, 1, Permanent, StateFailed},
	}
	for _, c := range cases {
		v := Classify(c.status)
		if v != c.verdict {
			t.Errorf("Classify(%d) = %v, want %v", c.status, v, c.verdict)
		}
		if v == Delivered {
			continue
		}
		if st, _ := Next(v, c.attempts, 0.5); st != c.state {
			t.Errorf("Next(%d, %d) = %s, want %s", c.status, c.attempts, st, c.state)
		}
	}
}

func TestSignVerify(t *testing.T) {
	secret, body := []byte("s3cret"), []byte(`{"id":1}`)
	now := time.Unix(1_700_000_000, 0)
	h := Sign(secret, body, now)
	cases := []struct {
		name   string
		secret []byte
		body   []byte
		header string
		at     time.Time
		want   error
	}{
		{"good", secret, body, h, now, nil},
		{"4 minutes later", secret, body, h, now.Add(4 * time.Minute), nil},
		{"6 minutes later", secret, body, h, now.Add(6 * time.Minute), ErrStale},
		{"from the future", secret, body, h, now.Add(-6 * time.Minute), ErrStale},
		{"other body", secret, []byte(`{"id":2}`), h, now, ErrBadSignature},
		{"other secret", []byte("x"), body, h, now, ErrBadSignature},
		{"rotated: second v1 matches", secret, body, "t=1700000000,v1=00," + h[len("t=1700000000,"):], now, nil},
		{"no time", secret, body, "v1=00", now, ErrMalformed},
		{"garbage", secret, body, "nonsense", now, ErrMalformed},
	}
	for _, c := range cases {
		if err := Verify(c.secret, c.body, c.header, c.at); err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestAllowedIP(t *testing.T) {
	cases := map[string]bool{
		"8.8.8.8": true, "2001:4860:4860::8888": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fc00::1": false, "fd12::1": false, "0.0.0.0": false,
		"::": false, "224.0.0.1": false, "ff02::1": false, "::ffff:127.0.0.1": false, "100.64.0.1": false,
		"::ffff:10.0.0.1": false,
		// Review: IPv6 forms that embed or translate to an IPv4 address,
		// and ranges that are not the internet.
		"::7f00:1": false, "::a00:1": false, "fec0::1": false, "64:ff9b:1::a00:1": false, "64:ff9b::a00:1": false,
		"2002:a00:1::1": false, "2001:0:a00:1::1": false, "100::1": false, "2001:db8::1": false,
		"192.0.2.1": false, "255.255.255.255": false, "1.1.1.1": true, "2606:4700:4700::1111": true,
	}
	for s, want := range cases {
		if got := AllowedIP(netip.MustParseAddr(s)); got != want {
			t.Errorf("AllowedIP(%s) = %v, want %v", s, got, want)
		}
	}
	if AllowedAddr("127.0.0.1:80") || !AllowedAddr("[2001:4860:4860::8888]:443") || AllowedAddr("garbage") {
		t.Error("AllowedAddr")
	}
}

func TestCheckURL(t *testing.T) {
	cases := []struct {
		url          string
		allowPrivate bool
		ok           bool
	}{
		{"https://hooks.example.com/x", false, true},
		{"http://hooks.example.com/x", false, false},
		{"http://127.0.0.1:8080/x", true, true},
		{"https://127.0.0.1/x", false, false},
		{"https://[::1]/x", false, false},
		{"https://user:pw@example.com/", false, false},
		{"ftp://example.com/", true, false},
		{"https:///nohost", false, false},
		{"https://example.com/#frag", false, false},
		{"https://example.com/" + string(make([]byte, MaxURLLength)), false, false},
		{"::not a url", false, false},
	}
	for _, c := range cases {
		if err := CheckURL(c.url, c.allowPrivate); (err == nil) != c.ok {
			t.Errorf("CheckURL(%.40q, %v) = %v, want ok=%v", c.url, c.allowPrivate, err, c.ok)
		}
	}
}

func TestTail(t *testing.T) {
	cases := []struct {
		lines []string
		max   int
		want  string
	}{
		{nil, 10, ""},
		{[]string{"a", "b", "c"}, 100, "a\nb\nc"},
		{[]string{"first", "second", "third"}, 12, "third"},
		{[]string{"first", "second", "third"}, 13, "second\nthird"},
		{[]string{"x", "0123456789"}, 4, "6789"},
	}
	for _, c := range cases {
		if got := Tail(c.lines, c.max); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.lines, c.max, got, c.want)
		}
	}
}

// TestTruncate: last_error is bounded and always valid UTF-8, whether
// the cut falls inside a character or the text came with invalid bytes.
func TestTruncate(t *testing.T) {
	for _, in := range []string{
		"short",
		"x" + strings.Repeat("é", 300),
		"receiver answered 500 \xff\xfe broken",
		strings.Repeat("a", 1000),
	} {
		got := Truncate(in)
		if len(got) > maxErrorBytes || !utf8.ValidString(got) || !strings.HasPrefix(in, got[:min(len(got), 5)]) {
			t.Errorf("Truncate(%.20q…) = %d bytes, valid %v", in, len(got), utf8.ValidString(got))
		}
	}
}
