package worker

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify/mail"
)

func TestMailLease(t *testing.T) {
	for _, tt := range []struct {
		mails   int
		perMail time.Duration
		want    time.Duration
	}{
		{0, 33 * time.Second, 33*time.Second + mailLeaseMargin}, // nothing to send: still a sane lease
		{1, 33 * time.Second, 33*time.Second + mailLeaseMargin},
		{20, 33 * time.Second, 660*time.Second + mailLeaseMargin}, // a full plan at the relay's timeout each
		{3, 100 * time.Millisecond, 300*time.Millisecond + mailLeaseMargin},
	} {
		if got := MailLease(tt.mails, tt.perMail); got != tt.want {
			t.Errorf("MailLease(%d, %v) = %v, want %v", tt.mails, tt.perMail, got, tt.want)
		}
	}
	// The default lease covers a plan of Batch mails at the relay's timeout.
	if l := MailLease(20, mail.DefaultTimeout+tailTimeout); l < 20*mail.DefaultTimeout {
		t.Errorf("a full plan is leased %v, less than its sends may take", l)
	}
}

func TestBreakerPause(t *testing.T) {
	for _, tt := range []struct {
		name                string
		failures, threshold int
		wantOpen            bool
		want                time.Duration
	}{
		{"below the threshold: closed", 4, 5, false, 0},
		{"no failures", 0, 5, false, 0},
		{"at the threshold: first backoff", 5, 5, true, 10 * time.Second},
		{"beyond: doubles", 7, 5, true, 40 * time.Second},
		{"far beyond: capped at an hour", 60, 5, true, time.Hour},
		{"threshold 0: never opens", 100, 0, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, open := BreakerPause(tt.failures, tt.threshold, 1) // rnd 1: the whole backoff
			if open != tt.wantOpen || got != tt.want {
				t.Errorf("BreakerPause(%d, %d) = %v, %v; want %v, %v", tt.failures, tt.threshold, got, open, tt.want, tt.wantOpen)
			}
		})
	}
}

func TestTailWait(t *testing.T) {
	for _, tt := range []struct {
		name    string
		age     time.Duration
		fetched bool
		tail    string
		want    time.Duration
	}{
		{"fresh event: wait for the shipper", time.Second, false, "", 14 * time.Second},
		{"settled: read the tail", 15 * time.Second, false, "", 0},
		{"tail found: send", 16 * time.Second, true, "failing", 0},
		{"empty while young: once more, at a minute", 16 * time.Second, true, "", 44 * time.Second},
		{"empty at a minute: send without", time.Minute, true, "", 0},
		{"old event, tail found", time.Hour, true, "x", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := TailWait(tt.age, tt.fetched, tt.tail); got != tt.want {
				t.Errorf("TailWait(%v, %v, %q) = %v, want %v", tt.age, tt.fetched, tt.tail, got, tt.want)
			}
		})
	}
}
