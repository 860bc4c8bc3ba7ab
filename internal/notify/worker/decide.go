package worker

import (
	"time"

	"github.com/hostcron/hostcron/internal/notify"
)

// mailLeaseMargin covers a mail plan's bookkeeping (recording each
// attempt) on top of its sends.
const mailLeaseMargin = 30 * time.Second

// MailLease is how long a mail plan's deliveries are leased: every mail
// of the plan may take perMail (the relay's timeout and a tail read), one
// after the other. A shorter lease would run out mid-plan and let another
// replica send the rest again.
func MailLease(mails int, perMail time.Duration) time.Duration {
	return time.Duration(max(mails, 1))*perMail + mailLeaseMargin
}

// BreakerPause decides whether a webhook target's circuit opens after
// its failures-th consecutive failed attempt (threshold or more): then
// its other pending deliveries wait the backoff of the failures beyond
// the threshold (notify.Backoff: from 10 s, doubling, capped at 1 h), so
// a receiver that is down is not hit by every queued event at once.
func BreakerPause(failures, threshold int, rnd float64) (time.Duration, bool) {
	if threshold <= 0 || failures < threshold {
		return 0, false
	}
	return notify.Backoff(failures-threshold+1, rnd), true
}

const (
	// TailSettle is how old a disable_warning must be before its first
	// attempt when a log store is read for its output tail: a node's log
	// shipper pushes in batches of up to a second, plus the store's own
	// ingestion, so an event delivered at once finds no output.
	TailSettle = 15 * time.Second
	// TailPatience is how long a disable_warning whose tail comes back
	// empty is rescheduled for (once: after it the event is sent as is).
	TailPatience = 60 * time.Second
)

// TailWait is how long a disable_warning of age should wait before it is
// attempted: until TailSettle before the tail is read (fetched false);
// after, with an empty tail, until TailPatience (the output may still be
// on its way; an event that old is sent without it). 0: attempt now.
func TailWait(age time.Duration, fetched bool, tail string) time.Duration {
	switch {
	case !fetched && age < TailSettle:
		return TailSettle - age
	case fetched && tail == "" && age < TailPatience:
		return TailPatience - age
	}
	return 0
}
