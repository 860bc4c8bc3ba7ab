package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries a webhook's signature:
//
//	Hostcron-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//
// The timestamp is inside the MAC, so a captured request cannot be
// replayed with a fresh time; receivers reject one older than
// ReplayWindow.
const SignatureHeader = "Hostcron-Signature"

// ReplayWindow is how far a signature's time may be from the receiver's
// clock.
const ReplayWindow = 5 * time.Minute

// Sign is the SignatureHeader value of body sent at ts.
func Sign(secret, body []byte, ts time.Time) string {
	t := strconv.FormatInt(ts.Unix(), 10)
	return "t=" + t + ",v1=" + mac(secret, t, body)
}

func mac(secret []byte, t string, body []byte) string {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(t))
	h.Write([]byte("."))
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Signature errors.
var (
	ErrBadSignature = errors.New("signature does not match")
	ErrStale        = errors.New("signature outside the replay window")
	ErrMalformed    = errors.New("malformed signature header")
)

// Verify checks a SignatureHeader value against body at now: the MAC in
// constant time, then the time within ReplayWindow either way. Several
// v1 values (a secret being rotated) pass if any matches.
func Verify(secret, body []byte, header string, now time.Time) error {
	var t string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return ErrMalformed
		case k == "t":
			t = v
		case k == "v1":
			sigs = append(sigs, v)
		}
	}
	unix, err := strconv.ParseInt(t, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrMalformed
	}
	want := mac(secret, t, body)
	matched := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			matched = true
		}
	}
	if !matched {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(unix, 0)); d > ReplayWindow || d < -ReplayWindow {
		return ErrStale
	}
	return nil
}
