package trust

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PageSignatureHeader carries the core's signature of a desired-set page
// (GET /internal/v1/nodes/{node}/desired-jobs). The node reads its set
// over HTTP, not as a sealed payload, so the page carries the core's
// Ed25519 signature itself: a party answering in the core API's name
// (a mis-issued certificate, a proxy, DNS) cannot make it up.
const PageSignatureHeader = "Hostcron-Page-Signature"

// pageDomain separates page signatures from payload signatures (domain):
// what the core signs as one can never verify as the other, whatever the
// bytes.
const pageDomain = "hostcron-page-v1\x00"

// Why a page is refused; errors.Is works on what VerifyPage returns.
var (
	ErrPageUnsigned      = errors.New("desired-set page carries no core signature")
	ErrPageUnknownSigner = errors.New("desired-set page signed by a key this node does not trust")
	ErrPageBadSignature  = errors.New("desired-set page signature does not verify (tampered, or signed for another node, cursor or page size)")
	ErrPageStale         = errors.New("desired-set page signature is too old or from the future")
)

// PageRequest is what a page is bound to: the request the node made. A
// page served for another node, after another cursor or in another size
// does not verify, so pages cannot be spliced into another set or
// replayed across nodes.
type PageRequest struct {
	Node  string // the node id in the path
	After string // the cursor ("" for the first page)
	Limit int    // jobs per page
}

// SignPage is the value of PageSignatureHeader for body, the exact bytes
// of the page served for req: "signer.signed_at.signature" (the signer's
// KeyID, unix milliseconds, the signature in unpadded base64url).
func SignPage(key ed25519.PrivateKey, req PageRequest, body []byte, now time.Time) string {
	signer := KeyID(key.Public().(ed25519.PublicKey))
	at := now.UnixMilli()
	sig := ed25519.Sign(key, pageBytes(signer, at, req, body))
	return signer + "." + strconv.FormatInt(at, 10) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// VerifyPage accepts body, the page read for req, only if header is a
// signature of it for req by one of the trusted keys (the core's), dated
// no more than maxAge ago nor more than the payload codec's clock skew
// ahead of now: the same keys and freshness a node holds payloads to.
func VerifyPage(trusted map[string]ed25519.PublicKey, maxAge time.Duration, req PageRequest, body []byte, header string, now time.Time) error {
	if header == "" {
		return ErrPageUnsigned
	}
	parts := strings.Split(header, ".")
	if len(parts) != 3 {
		return fmt.Errorf("%w: malformed %s", ErrPageUnsigned, PageSignatureHeader)
	}
	at, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed signing time: %v", ErrPageUnsigned, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fmt.Errorf("%w: malformed signature: %v", ErrPageUnsigned, err)
	}
	// The signature first: nothing else in the header is believed before
	// it is known to come from a trusted key.
	pub, ok := trusted[parts[0]]
	if !ok {
		return fmt.Errorf("%w: %q", ErrPageUnknownSigner, parts[0])
	}
	if !ed25519.Verify(pub, pageBytes(parts[0], at, req, body), sig) {
		return fmt.Errorf("%w: signer %s, node %s, after %q, limit %d", ErrPageBadSignature, parts[0], req.Node, req.After, req.Limit)
	}
	age := now.Sub(time.UnixMilli(at))
	if age > maxAge || age < -clockSkew {
		return fmt.Errorf("%w: signed %s ago, max %s", ErrPageStale, age.Round(time.Second), maxAge)
	}
	return nil
}

// pageBytes is an unambiguous spelling of what a page signature covers,
// length-prefixed like signedBytes but under pageDomain.
func pageBytes(signer string, at int64, req PageRequest, body []byte) []byte {
	b := []byte(pageDomain)
	field := func(v string) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	field(signer)
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	field(req.Node)
	field(req.After)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(req.Limit)))
	field(string(body))
	return b
}
