package desiredset

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// The client asks for the node's own digest with its credential and takes
// it only as the core signed it for the digest request (cursor "digest",
// limit 0): a page's signature, a tampered body, a digest that is not
// SetDigest's shape are refused; a core from before the endpoint (404) is
// a plain, retryable error, not a final refusal, and revisions_ahead is
// wire.ErrRevisionsAhead.
func TestClientDigest(t *testing.T) {
	const node = "00000000-0000-4000-8000-0000000000aa"
	_, core, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pub := core.Public().(ed25519.PublicKey)
	verifier := &trust.PageVerifier{Core: map[string]ed25519.PublicKey{trust.KeyID(pub): pub}, MaxAge: 10 * time.Minute}
	good := wire.SetDigest([]wire.Job{job(id1), job(id2)})
	goodBody := `{"digest":"` + good + `","jobs":2}`
	digestReq := trust.PageRequest{Node: node, After: wire.DesiredDigestCursor, Limit: 0}

	type answer struct {
		status   int
		body     string // served
		signed   string // what the signature covers ("": body)
		req      trust.PageRequest
		key      ed25519.PrivateKey
		unsigned bool
	}
	for _, tc := range []struct {
		name    string
		a       answer
		checked bool // the client verifies signatures
		want    wire.DesiredDigest
		wantErr error // with want zero: any error if nil and the answer is bad
		refused bool  // errors.Is(err, ErrRefused)
		bad     bool
	}{
		{name: "signed digest", a: answer{status: 200, body: goodBody, req: digestReq, key: core}, checked: true,
			want: wire.DesiredDigest{Digest: good, Jobs: 2}},
		{name: "unchecked client takes it unsigned", a: answer{status: 200, body: goodBody, unsigned: true},
			want: wire.DesiredDigest{Digest: good, Jobs: 2}},
		{name: "an empty set", a: answer{status: 200, body: `{"digest":"` + wire.SetDigest(nil) + `","jobs":0}`, req: digestReq, key: core}, checked: true,
			want: wire.DesiredDigest{Digest: wire.SetDigest(nil), Jobs: 0}},
		{name: "signed as a first page", a: answer{status: 200, body: goodBody, req: trust.PageRequest{Node: node, After: "", Limit: 500}, key: core},
			checked: true, bad: true, wantErr: trust.ErrPageBadSignature},
		{name: "signed for another node", a: answer{status: 200, body: goodBody,
			req: trust.PageRequest{Node: "00000000-0000-4000-8000-0000000000bb", After: wire.DesiredDigestCursor}, key: core},
			checked: true, bad: true, wantErr: trust.ErrPageBadSignature},
		{name: "tampered body", a: answer{status: 200, body: `{"digest":"` + wire.SetDigest(nil) + `","jobs":0}`, signed: goodBody, req: digestReq, key: core},
			checked: true, bad: true, wantErr: trust.ErrPageBadSignature},
		{name: "unsigned", a: answer{status: 200, body: goodBody, unsigned: true}, checked: true, bad: true, wantErr: trust.ErrPageUnsigned},
		{name: "signed by another key", a: answer{status: 200, body: goodBody, req: digestReq, key: other}, checked: true, bad: true,
			wantErr: trust.ErrPageUnknownSigner},
		{name: "upper-case hex", a: answer{status: 200, body: `{"digest":"` + strings.ToUpper(good) + `","jobs":2}`, req: digestReq, key: core},
			checked: true, bad: true},
		{name: "short digest", a: answer{status: 200, body: `{"digest":"` + good[:63] + `","jobs":2}`, req: digestReq, key: core},
			checked: true, bad: true},
		{name: "not hex", a: answer{status: 200, body: `{"digest":"` + good[:63] + `g","jobs":2}`, req: digestReq, key: core},
			checked: true, bad: true},
		{name: "no digest", a: answer{status: 200, body: `{"jobs":2}`, req: digestReq, key: core}, checked: true, bad: true},
		{name: "negative count", a: answer{status: 200, body: `{"digest":"` + good + `","jobs":-1}`, req: digestReq, key: core},
			checked: true, bad: true},
		{name: "not JSON", a: answer{status: 200, body: `<html>`, unsigned: true}, bad: true},
		{name: "over the bound", a: answer{status: 200, body: `{"digest":"` + good + `","jobs":2,"x":"` + strings.Repeat("a", 5000) + `"}`, unsigned: true},
			bad: true},
		{name: "older core (404)", a: answer{status: 404, body: `404 page not found`, unsigned: true}, checked: true, bad: true},
		{name: "older core behind a proxy (404, large page)", a: answer{status: 404, body: strings.Repeat("x", 5000), unsigned: true},
			checked: true, bad: true},
		{name: "outage", a: answer{status: 503, body: `{"error":{"code":"unavailable"}}`, unsigned: true}, checked: true, bad: true},
		{name: "another node's digest", a: answer{status: 403, body: `{"error":{"code":"forbidden","message":"a node reads only its own desired set"}}`, unsigned: true},
			checked: true, bad: true, refused: true},
		{name: "revisions ahead", a: answer{status: 409, body: `{"error":{"code":"revisions_ahead","message":"x"}}`, unsigned: true},
			checked: true, bad: true, wantErr: wire.ErrRevisionsAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer secret" {
					t.Errorf("credential %q", r.Header.Get("Authorization"))
				}
				asked = r.URL.RequestURI()
				if !tc.a.unsigned {
					signed := tc.a.signed
					if signed == "" {
						signed = tc.a.body
					}
					w.Header().Set(trust.PageSignatureHeader, trust.SignPage(tc.a.key, tc.a.req, []byte(signed), time.Now()))
				}
				w.WriteHeader(tc.a.status)
				_, _ = w.Write([]byte(tc.a.body))
			}))
			defer srv.Close()
			c := Client{BaseURL: srv.URL, Credential: "secret", Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if tc.checked {
				c.Pages = verifier
			}
			d, err := c.Digest(context.Background(), node)
			if want := "/internal/v1/nodes/" + node + "/desired-digest"; asked != want {
				t.Errorf("asked %q, want %q", asked, want)
			}
			if !tc.bad {
				if err != nil || d != tc.want {
					t.Fatalf("digest %+v, %v; want %+v", d, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("digest %+v taken; want refused", d)
			}
			if d != (wire.DesiredDigest{}) {
				t.Errorf("a refused answer gave %+v", d)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v; want %v", err, tc.wantErr)
			}
			if errors.Is(err, ErrRefused) != tc.refused {
				t.Errorf("err = %v: final refusal %v, want %v", err, errors.Is(err, ErrRefused), tc.refused)
			}
		})
	}
}
