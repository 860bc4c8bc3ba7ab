package trust

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// A node accepts a page only as the core signed it, for the very request
// it made, recently; every other answer is refused with its reason.
func TestVerifyPage(t *testing.T) {
	core, other := newKey(t), newKey(t)
	trusted := pubs(core)
	now := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	const maxAge = 10 * time.Minute
	req := PageRequest{Node: "00000000-0000-4000-8000-0000000000aa", After: "00000000-0000-4000-8000-000000000001", Limit: 500}
	body := []byte(`{"jobs":[{"id":"00000000-0000-4000-8000-000000000002","tenant":"acme"}],"snapshot":{"xmin":5,"xmax":9}}`)
	signed := SignPage(core, req, body, now)

	with := func(f func(*PageRequest)) PageRequest { r := req; f(&r); return r }
	cases := []struct {
		name   string
		req    PageRequest
		body   []byte
		header string
		at     time.Time // when the node verifies
		want   error     // nil: accepted
	}{
		{"valid", req, body, signed, now, nil},
		{"valid at the freshness bound", req, body, signed, now.Add(maxAge), nil},
		{"valid a little ahead of the node's clock", req, body, signed, now.Add(-30 * time.Second), nil},
		{"body tampered", req, []byte(`{"jobs":[],"snapshot":{"xmin":5,"xmax":9}}`), signed, now, ErrPageBadSignature},
		{"body truncated", req, body[:len(body)-1], signed, now, ErrPageBadSignature},
		{"another node's page", with(func(r *PageRequest) { r.Node = "00000000-0000-4000-8000-0000000000bb" }), body, signed, now, ErrPageBadSignature},
		{"another cursor's page", with(func(r *PageRequest) { r.After = "" }), body, signed, now, ErrPageBadSignature},
		{"another page size's page", with(func(r *PageRequest) { r.Limit = 1000 }), body, signed, now, ErrPageBadSignature},
		{"signed by a key the node does not trust", req, body, SignPage(other, req, body, now), now, ErrPageUnknownSigner},
		{"another key's signature under the core's id", req, body,
			KeyID(core.Public().(ed25519.PublicKey)) + "." + strconv.FormatInt(now.UnixMilli(), 10) + "." +
				base64.RawURLEncoding.EncodeToString(ed25519.Sign(other, pageBytes(KeyID(core.Public().(ed25519.PublicKey)), now.UnixMilli(), req, body))),
			now, ErrPageBadSignature},
		{"signing time moved", req, body, resign(signed, now.Add(5*time.Minute)), now.Add(5 * time.Minute), ErrPageBadSignature},
		{"stale", req, body, signed, now.Add(maxAge + time.Second), ErrPageStale},
		{"from the future", req, body, signed, now.Add(-2 * time.Minute), ErrPageStale},
		{"unsigned", req, body, "", now, ErrPageUnsigned},
		{"malformed", req, body, "ed-0011223344556677", now, ErrPageUnsigned},
		{"signature not base64", req, body, KeyID(core.Public().(ed25519.PublicKey)) + ".1.!!", now, ErrPageUnsigned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := VerifyPage(trusted, maxAge, c.req, c.body, c.header, c.at)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

// resign replaces a header's signing time, keeping its signature.
func resign(header string, at time.Time) string {
	parts := strings.Split(header, ".")
	return parts[0] + "." + strconv.FormatInt(at.UnixMilli(), 10) + "." + parts[2]
}

// The core signs pages and payloads with one key; the domains keep the
// two apart: a payload signature over the very bytes of a page does not
// verify as that page's signature, and a page signature does not verify
// as a payload's.
func TestPageAndPayloadSignaturesDoNotTransfer(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	req := PageRequest{Node: "n1", Limit: 500}
	body := []byte(`{"jobs":[],"snapshot":{"xmin":5,"xmax":9}}`)
	coreID := KeyID(f.core.Public().(ed25519.PublicKey))

	// A payload the core sealed for n1 whose data is the page's body.
	sealed, err := f.coreCodec.WithSerializationContext(reconcileOn("n1")).Encode([]*commonpb.Payload{{Data: body}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := f.nodeCodec.decrypt(sealed[0])
	if err != nil {
		t.Fatal(err)
	}
	if env.Signer != coreID || string(env.Data) != string(body) {
		t.Fatalf("envelope %+v", env)
	}
	replayed := env.Signer + "." + strconv.FormatInt(env.SignedAt, 10) + "." + base64.RawURLEncoding.EncodeToString(env.Sig)
	if err := VerifyPage(pubs(f.core), time.Hour, req, body, replayed, now); !errors.Is(err, ErrPageBadSignature) {
		t.Fatalf("payload signature as a page signature: err = %v, want %v", err, ErrPageBadSignature)
	}

	// Only the domains keep these two apart: a payload whose binding is
	// the node id and whose data continues where a page's fields go spells
	// the very bytes of a page (after "", a limit whose high half is the
	// data's length) but for the domain.
	const limitLow = 500
	data := binary.BigEndian.AppendUint32(nil, limitLow)
	data = binary.BigEndian.AppendUint32(data, uint32(len(body)))
	data = append(data, body...)
	crafted := PageRequest{Node: "n1", Limit: len(data)<<32 | limitLow}
	twin := envelope{Signer: coreID, SignedAt: now.UnixMilli(), Binding: crafted.Node, Data: data}
	if string(signedBytes(twin)[len(domain):]) != string(pageBytes(coreID, twin.SignedAt, crafted, body)[len(pageDomain):]) {
		t.Fatal("the crafted payload does not spell the page's bytes")
	}
	twinSig := coreID + "." + strconv.FormatInt(twin.SignedAt, 10) + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(f.core, signedBytes(twin)))
	if err := VerifyPage(pubs(f.core), time.Hour, crafted, body, twinSig, now); !errors.Is(err, ErrPageBadSignature) {
		t.Fatalf("crafted payload signature as a page signature: err = %v, want %v", err, ErrPageBadSignature)
	}

	// The other way: a page signature put in an envelope.
	at := now.UnixMilli()
	pageSig := ed25519.Sign(f.core, pageBytes(coreID, at, req, body))
	forged := envelope{Signer: coreID, SignedAt: at, Binding: bindingOf(reconcileOn("n1")), Data: body, Sig: pageSig}
	node := f.nodeCodec.WithSerializationContext(reconcileOn("n1")).(*Codec)
	if err := node.verify(forged); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("page signature as a payload signature: err = %v, want %v", err, ErrBadSignature)
	}
	forged.Metadata = map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}
	if err := node.verify(forged); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("page signature as a payload signature (with metadata): err = %v, want %v", err, ErrBadSignature)
	}
}
