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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

const (
	id1 = "00000000-0000-4000-8000-000000000001"
	id2 = "00000000-0000-4000-8000-000000000002"
	id3 = "00000000-0000-4000-8000-000000000003"
)

func job(id string) wire.Job { return wire.Job{ID: id, Tenant: "acme"} }

// pages serves the given pages in order, checking each is asked for after
// the cursor the previous one gave.
func pages(t *testing.T, ps ...wire.DesiredPage) PageFunc {
	t.Helper()
	n := 0
	return func(_ context.Context, after string) (wire.DesiredPage, error) {
		if n >= len(ps) {
			t.Fatalf("page %d asked for; only %d", n+1, len(ps))
		}
		want := ""
		if n > 0 {
			want = ps[n-1].Next
		}
		if after != want {
			t.Errorf("page %d asked after %q, want %q", n+1, after, want)
		}
		n++
		return ps[n-1], nil
	}
}

// The set is every page's jobs in order, once, with the snapshot that sees
// only what every page's did: a write committed between two pages' reads
// is not seen, so no unit installed by it is taken for an orphan.
func TestAssembleJoinsPagesUnderTheirCommonSnapshot(t *testing.T) {
	first := wire.Snapshot{Xmin: 100, Xmax: 104, Xip: []uint64{102}}
	later := wire.Snapshot{Xmin: 106, Xmax: 108}
	set, err := Assemble(context.Background(), pages(t,
		wire.DesiredPage{Jobs: []wire.Job{job(id1), job(id2)}, Snapshot: first, Next: id2},
		wire.DesiredPage{Jobs: []wire.Job{job(id3)}, Snapshot: later},
	))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Jobs) != 3 || set.Jobs[0].ID != id1 || set.Jobs[1].ID != id2 || set.Jobs[2].ID != id3 {
		t.Errorf("jobs %+v, want %s, %s, %s", set.Jobs, id1, id2, id3)
	}
	for _, rev := range []uint64{102, 104, 105} {
		if set.Snapshot.Sees(rev) {
			t.Errorf("set snapshot %+v sees %d, which the first page's did not", set.Snapshot, rev)
		}
	}
	if !set.Snapshot.Sees(101) {
		t.Errorf("set snapshot %+v does not see 101, which both pages saw", set.Snapshot)
	}
	// Each page's range with its own snapshot, for the orphans it found
	// absent: the first up to its last id, the second to the end.
	if len(set.Pages) != 2 || set.Pages[0].Last != id2 || set.Pages[0].Snapshot.Xmax != 104 ||
		set.Pages[1].Last != "" || set.Pages[1].Snapshot.Xmin != 106 {
		t.Errorf("pages %+v, want (.., %s] at %+v and (%s, ..) at %+v", set.Pages, id2, first, id2, later)
	}
}

func TestAssembleOnePageAndEmptySet(t *testing.T) {
	snap := wire.Snapshot{Xmin: 100, Xmax: 101}
	set, err := Assemble(context.Background(), pages(t, wire.DesiredPage{Jobs: []wire.Job{}, Snapshot: snap}))
	if err != nil || len(set.Jobs) != 0 || set.Snapshot.Xmax != 101 || len(set.Pages) != 1 || set.Pages[0].Last != "" {
		t.Errorf("empty set: %+v, %v; want no jobs with the page's snapshot, one page holding every id", set, err)
	}
}

// A core (or anything between) that does not move the cursor forward is
// refused, not followed: the set would list a job twice or never end.
func TestAssembleRefusesPagesOutOfOrder(t *testing.T) {
	snap := wire.Snapshot{Xmin: 1, Xmax: 2}
	for _, tc := range []struct {
		name  string
		pages []wire.DesiredPage
	}{
		{"unsorted page", []wire.DesiredPage{{Jobs: []wire.Job{job(id2), job(id1)}, Snapshot: snap}}},
		{"duplicate in a page", []wire.DesiredPage{{Jobs: []wire.Job{job(id1), job(id1)}, Snapshot: snap}}},
		{"next page repeats", []wire.DesiredPage{
			{Jobs: []wire.Job{job(id1), job(id2)}, Snapshot: snap, Next: id2},
			{Jobs: []wire.Job{job(id2)}, Snapshot: snap}}},
		{"next is not the last id", []wire.DesiredPage{{Jobs: []wire.Job{job(id1), job(id2)}, Snapshot: snap, Next: id1}}},
		{"next on an empty page", []wire.DesiredPage{{Snapshot: snap, Next: id1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if set, err := Assemble(context.Background(), pages(t, tc.pages...)); err == nil {
				t.Errorf("assembled %+v, want refused", set)
			}
		})
	}
}

// The client asks for the node's own set with its credential, and sorts
// the core's refusals into final (another node's set, a bad request, the
// revisions check) and retried (a rotation, an old replica, an outage).
func TestClientPagesAndClassifiesRefusals(t *testing.T) {
	const node = "00000000-0000-4000-8000-0000000000aa"
	var status int
	var body string
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			t.Errorf("credential %q", r.Header.Get("Authorization"))
		}
		asked = append(asked, r.URL.RequestURI())
		if status != 0 {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
			return
		}
		if r.URL.Query().Get("after") == "" {
			_, _ = w.Write([]byte(`{"jobs":[{"id":"` + id1 + `","tenant":"acme"}],"snapshot":{"xmin":5,"xmax":9},"next":"` + id1 + `"}`))
			return
		}
		_, _ = w.Write([]byte(`{"jobs":[{"id":"` + id2 + `","tenant":"acme"}],"snapshot":{"xmin":7,"xmax":9}}`))
	}))
	defer srv.Close()
	c := Client{BaseURL: srv.URL, Credential: "secret", PageSize: 1}
	set, err := c.DesiredSet(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Jobs) != 2 || set.Snapshot.Xmin != 5 {
		t.Errorf("set %+v", set)
	}
	want := []string{"/internal/v1/nodes/" + node + "/desired-jobs?limit=1",
		"/internal/v1/nodes/" + node + "/desired-jobs?after=" + id1 + "&limit=1"}
	if strings.Join(asked, " ") != strings.Join(want, " ") {
		t.Errorf("asked %q, want %q", asked, want)
	}
	for _, tc := range []struct {
		status             int
		body               string
		refused, revsAhead bool
	}{
		{403, `{"error":{"code":"forbidden","message":"a node reads only its own desired set"}}`, true, false},
		{400, `{"error":{"code":"invalid","field":"after"}}`, true, false},
		{409, `{"error":{"code":"revisions_ahead","message":"x"}}`, false, true},
		{401, `{"error":{"code":"unauthorized"}}`, false, false},
		{404, `404 page not found`, false, false},
		{503, `{"error":{"code":"unavailable"}}`, false, false},
	} {
		status, body = tc.status, tc.body
		_, err := c.DesiredSet(context.Background(), node)
		if err == nil || errors.Is(err, ErrRefused) != tc.refused || errors.Is(err, wire.ErrRevisionsAhead) != tc.revsAhead {
			t.Errorf("answer %d: %v; want refused=%v revisions-ahead=%v", tc.status, err, tc.refused, tc.revsAhead)
		}
	}
}

// signedCore serves a node's two-page set (PageSize 1) as the core does,
// each page signed with key for the request that read it; tamper may
// change what goes out after signing (or what is signed) for one page.
type signedCore struct {
	key    ed25519.PrivateKey
	tamper func(p *servedPage)
}

// servedPage is one answer: what is signed for, the body, the header.
type servedPage struct {
	req    trust.PageRequest // the request as the server read it
	signed trust.PageRequest // what the signature is bound to
	body   []byte
	header string
	key    ed25519.PrivateKey
	at     time.Time
	sign   bool // false: the header as set, unsigned
}

func (s signedCore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	node := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/internal/v1/nodes/"), "/desired-jobs")
	p := servedPage{req: trust.PageRequest{Node: node, After: after, Limit: limit}, key: s.key, at: time.Now(), sign: true}
	p.signed = p.req
	if after == "" {
		p.body = []byte(`{"jobs":[{"id":"` + id1 + `","tenant":"acme"}],"snapshot":{"xmin":5,"xmax":9},"next":"` + id1 + `"}`)
	} else {
		p.body = []byte(`{"jobs":[{"id":"` + id2 + `","tenant":"acme"}],"snapshot":{"xmin":7,"xmax":9}}`)
	}
	if s.tamper != nil {
		s.tamper(&p)
	}
	if p.sign {
		p.header = trust.SignPage(p.key, p.signed, p.body, p.at)
	}
	if p.header != "" {
		w.Header().Set(trust.PageSignatureHeader, p.header)
	}
	_, _ = w.Write(p.body)
}

// onSecondPage applies f to the second page only: the first one is good,
// so a refusal shows that no partial set comes out.
func onSecondPage(f func(p *servedPage)) func(p *servedPage) {
	return func(p *servedPage) {
		if p.req.After != "" {
			f(p)
		}
	}
}

// With the core's keys, the client takes a page only as the core signed
// it for the very request it made, recently; any other page fails the
// whole read (no partial set), and is not a final refusal: like a payload
// the codec refuses, the attempt is retried.
func TestClientVerifiesPages(t *testing.T) {
	const node = "00000000-0000-4000-8000-0000000000aa"
	_, core, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	pub := core.Public().(ed25519.PublicKey)
	verifier := &trust.PageVerifier{Core: map[string]ed25519.PublicKey{trust.KeyID(pub): pub}, MaxAge: 10 * time.Minute}
	for _, tc := range []struct {
		name   string
		tamper func(p *servedPage)
		want   error // nil: the set is read
	}{
		{"signed pages", nil, nil},
		{"a job added after signing", onSecondPage(func(p *servedPage) {
			p.sign = false
			p.header = trust.SignPage(p.key, p.signed, p.body, p.at)
			p.body = []byte(`{"jobs":[{"id":"` + id2 + `","tenant":"acme"},{"id":"` + id3 + `","tenant":"acme"}],"snapshot":{"xmin":7,"xmax":9}}`)
		}), trust.ErrPageBadSignature},
		{"an empty set for a signed one", func(p *servedPage) {
			p.sign = false
			p.header = trust.SignPage(p.key, p.signed, p.body, p.at)
			p.body = []byte(`{"jobs":[],"snapshot":{"xmin":5,"xmax":90}}`)
		}, trust.ErrPageBadSignature},
		{"another node's page", onSecondPage(func(p *servedPage) { p.signed.Node = "00000000-0000-4000-8000-0000000000bb" }), trust.ErrPageBadSignature},
		{"the first page replayed for the second", onSecondPage(func(p *servedPage) {
			p.signed.After = ""
			p.body = []byte(`{"jobs":[{"id":"` + id1 + `","tenant":"acme"}],"snapshot":{"xmin":5,"xmax":9},"next":"` + id1 + `"}`)
		}), trust.ErrPageBadSignature},
		{"signed for another page size", onSecondPage(func(p *servedPage) { p.signed.Limit = 500 }), trust.ErrPageBadSignature},
		{"unsigned page", onSecondPage(func(p *servedPage) { p.sign = false }), trust.ErrPageUnsigned},
		{"signed by another key", onSecondPage(func(p *servedPage) { p.key = other }), trust.ErrPageUnknownSigner},
		{"signed too long ago", onSecondPage(func(p *servedPage) { p.at = p.at.Add(-11 * time.Minute) }), trust.ErrPageStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(signedCore{key: core, tamper: tc.tamper})
			defer srv.Close()
			c := Client{BaseURL: srv.URL, Credential: "secret", PageSize: 1, Pages: verifier,
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			set, err := c.DesiredSet(context.Background(), node)
			if tc.want == nil {
				if err != nil || len(set.Jobs) != 2 {
					t.Fatalf("set %+v, %v; want both jobs", set, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || errors.Is(err, ErrRefused) {
				t.Fatalf("err = %v; want %v, retried", err, tc.want)
			}
			if len(set.Jobs) != 0 {
				t.Fatalf("a refused read gave jobs %+v", set.Jobs)
			}
		})
	}
	// Without trust material (nil Pages) pages are taken as they come, as
	// payloads are without the codec.
	srv := httptest.NewServer(signedCore{key: core, tamper: func(p *servedPage) { p.sign = false }})
	defer srv.Close()
	if set, err := (Client{BaseURL: srv.URL, PageSize: 1}).DesiredSet(context.Background(), node); err != nil || len(set.Jobs) != 2 {
		t.Fatalf("unchecked client: %+v, %v; want both jobs", set, err)
	}
}
