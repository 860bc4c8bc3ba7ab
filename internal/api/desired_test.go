package api

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestNodeReadsItsDesiredSetInPages: a node reads its shard's jobs (and no
// other shard's) page by page with its own credential; it may not read
// another node's set, nor another node its set, and bad cursors or page
// sizes are refused.
func TestNodeReadsItsDesiredSetInPages(t *testing.T) {
	v := newEnv(t)
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	want := map[string]bool{}
	for range 3 {
		want[v.createJob("")["id"].(string)] = true
	}
	// (The same storage dir: addTenant's webroot lies under it.)
	otherShard := v.mustJSON("POST", "/api/v1/admin/shards", adminKey, `{"name":"web-2","web_storage_dir":"/srv/shared/www"}`, 201)["id"].(string)
	other := v.mustJSON("POST", "/api/v1/admin/shards/"+otherShard+"/nodes", adminKey, `{"name":"node9"}`, 201)
	otherID, otherCred := other["id"].(string), other["credential"].(string)
	sameShard := v.mustJSON("POST", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, `{"name":"node2"}`, 201)
	otherTenant, otherWebroot, otherKey := v.addTenant("beta", otherShard)
	v.mustJSON("POST", "/api/v1/tenants/"+otherTenant+"/cron-jobs", otherKey,
		`{"webroot_id":"`+otherWebroot+`","schedule":"*/5 * * * *","command":"true"}`, 201)

	path := "/internal/v1/nodes/" + nodeID + "/desired-jobs"
	page := func(query string) wire.DesiredPage {
		t.Helper()
		code, out := v.do("GET", path+query, v.node, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %s", query, code, out)
		}
		var p wire.DesiredPage
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := page("?limit=2")
	if len(first.Jobs) != 2 || first.Next != first.Jobs[1].ID || first.Snapshot.Xmax == 0 {
		t.Fatalf("first page %+v: want 2 jobs, next its last id, a snapshot", first)
	}
	second := page("?limit=2&after=" + first.Next)
	if len(second.Jobs) != 1 || second.Next != "" {
		t.Fatalf("second page %+v: want the last job and no next", second)
	}
	got := map[string]bool{}
	for _, j := range append(first.Jobs, second.Jobs...) {
		got[j.ID] = true
		if !want[j.ID] {
			t.Errorf("job %s (tenant %s) is not this shard's", j.ID, j.Tenant)
		}
	}
	if len(got) != len(want) {
		t.Errorf("pages listed %d distinct jobs, want %d", len(got), len(want))
	}
	if all := page(""); len(all.Jobs) != 3 || all.Next != "" {
		t.Errorf("default page %+v: want all 3 jobs", all)
	}

	for _, tc := range []struct {
		name, path, cred string
		want             int
	}{
		{"another shard's node reads this node's set", path, otherCred, 403},
		{"a node of the same shard reads this node's set", path, sameShard["credential"].(string), 403},
		{"this node reads another node's set", "/internal/v1/nodes/" + otherID + "/desired-jobs", v.node, 403},
		{"no credential", path, "", 401},
		{"a tenant key", path, v.key, 401},
		{"not an id", "/internal/v1/nodes/node1/desired-jobs", v.node, 404},
		{"limit 0", path + "?limit=0", v.node, 400},
		{"limit over the bound", path + "?limit=1001", v.node, 400},
		{"cursor not an id", path + "?after=x", v.node, 400},
	} {
		if code, out := v.do("GET", tc.path, tc.cred, ""); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, out, tc.want)
		}
	}
}

// With the core's key every page carries its signature, bound to the
// request that read it: it verifies for that node, cursor and size under
// the core's public key, and for no other request.
func TestDesiredPagesAreSigned(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	core := map[string]ed25519.PublicKey{trust.KeyID(key.Public().(ed25519.PublicKey)): key.Public().(ed25519.PublicKey)}
	v := newEnvWith(t, Config{PageKey: key})
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	v.createJob("")
	second := v.createJob("")["id"].(string)
	first := v.createJob("")["id"].(string)
	if first > second {
		first, second = second, first
	}

	for _, req := range []trust.PageRequest{
		{Node: nodeID, Limit: 1},
		{Node: nodeID, After: first, Limit: 2},
		{Node: nodeID, Limit: wire.DesiredPageSize}, // no limit asked: the default is what is signed
	} {
		q := "?limit=" + strconv.Itoa(req.Limit)
		if req.Limit == wire.DesiredPageSize {
			q = "?"
		}
		if req.After != "" {
			q += "&after=" + req.After
		}
		code, hdr, body := v.doHeaders("GET", "/internal/v1/nodes/"+nodeID+"/desired-jobs"+q, v.node, "", nil)
		if code != 200 {
			t.Fatalf("%+v: %d %s", req, code, body)
		}
		sig := hdr.Get(trust.PageSignatureHeader)
		if err := trust.VerifyPage(core, time.Minute, req, body, sig, time.Now()); err != nil {
			t.Errorf("%+v: page does not verify: %v (header %q)", req, err, sig)
		}
		moved := req
		moved.After = second
		if err := trust.VerifyPage(core, time.Minute, moved, body, sig, time.Now()); !errors.Is(err, trust.ErrPageBadSignature) {
			t.Errorf("%+v: page verifies for cursor %s too: %v", req, second, err)
		}
	}
}

// Without the key (no trust material) pages go unsigned, as payloads do
// without the codec.
func TestDesiredPagesUnsignedWithoutKey(t *testing.T) {
	v := newEnv(t)
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	code, hdr, body := v.doHeaders("GET", "/internal/v1/nodes/"+nodeID+"/desired-jobs", v.node, "", nil)
	if code != 200 || hdr.Get(trust.PageSignatureHeader) != "" {
		t.Errorf("%d %q %s: want 200 without a signature", code, hdr.Get(trust.PageSignatureHeader), body)
	}
}

// A node reads the digest of its own set: the SetDigest of the jobs its
// pages list, signed for the digest request (cursor "digest", limit 0)
// and for no page request; another node's digest, or this node's by
// another node, is refused.
func TestNodeReadsItsDesiredDigest(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	core := map[string]ed25519.PublicKey{trust.KeyID(key.Public().(ed25519.PublicKey)): key.Public().(ed25519.PublicKey)}
	v := newEnvWith(t, Config{PageKey: key})
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	v.createJob("")
	v.createJob("")
	otherShard := v.mustJSON("POST", "/api/v1/admin/shards", adminKey, `{"name":"web-2","web_storage_dir":"/srv/shared/www"}`, 201)["id"].(string)
	other := v.mustJSON("POST", "/api/v1/admin/shards/"+otherShard+"/nodes", adminKey, `{"name":"node9"}`, 201)
	otherID, otherCred := other["id"].(string), other["credential"].(string)
	sameShard := v.mustJSON("POST", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, `{"name":"node2"}`, 201)

	path := "/internal/v1/nodes/" + nodeID + "/desired-digest"
	code, hdr, body := v.doHeaders("GET", path, v.node, "", nil)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	sig := hdr.Get(trust.PageSignatureHeader)
	if err := trust.VerifyPage(core, time.Minute, trust.PageRequest{Node: nodeID, After: wire.DesiredDigestCursor, Limit: 0}, body, sig, time.Now()); err != nil {
		t.Errorf("digest does not verify for the digest request: %v (header %q)", err, sig)
	}
	for _, req := range []trust.PageRequest{
		{Node: nodeID, After: "", Limit: wire.DesiredPageSize},
		{Node: nodeID, After: "", Limit: 0},
		{Node: nodeID, After: wire.DesiredDigestCursor, Limit: 1},
		{Node: otherID, After: wire.DesiredDigestCursor, Limit: 0},
	} {
		if err := trust.VerifyPage(core, time.Minute, req, body, sig, time.Now()); !errors.Is(err, trust.ErrPageBadSignature) {
			t.Errorf("the digest verifies as %+v: %v", req, err)
		}
	}
	var d wire.DesiredDigest
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	_, _, pageBody := v.doHeaders("GET", "/internal/v1/nodes/"+nodeID+"/desired-jobs", v.node, "", nil)
	var page wire.DesiredPage
	if err := json.Unmarshal(pageBody, &page); err != nil {
		t.Fatal(err)
	}
	if d.Jobs != 2 || len(page.Jobs) != 2 || d.Digest != wire.SetDigest(page.Jobs) {
		t.Errorf("digest %+v; want the SetDigest %s of the page's %d jobs", d, wire.SetDigest(page.Jobs), len(page.Jobs))
	}

	for _, tc := range []struct {
		name, path, cred string
		want             int
	}{
		{"this node reads another node's digest", "/internal/v1/nodes/" + otherID + "/desired-digest", v.node, 403},
		{"another shard's node reads this node's digest", path, otherCred, 403},
		{"a node of the same shard reads this node's digest", path, sameShard["credential"].(string), 403},
		{"no credential", path, "", 401},
		{"a tenant key", path, v.key, 401},
		{"not an id", "/internal/v1/nodes/node1/desired-digest", v.node, 404},
	} {
		if code, out := v.do("GET", tc.path, tc.cred, ""); code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, out, tc.want)
		}
	}
}

// A job whose revision is ahead of the transaction counter (a logical
// restore) refuses the node its set and its digest alike: 409
// revisions_ahead, so neither a full converge nor the fast path runs.
func TestDesiredReadsRefuseRevisionsAhead(t *testing.T) {
	v := newEnv(t)
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	id := v.createJob("")["id"].(string)
	if _, err := v.store.Pool().Exec(context.Background(), `UPDATE cron_jobs SET rev = '900000000000'::xid8 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/desired-jobs", "/desired-digest"} {
		code, _, body := v.doHeaders("GET", "/internal/v1/nodes/"+nodeID+path, v.node, "", nil)
		if code != 409 || !strings.Contains(string(body), "revisions_ahead") {
			t.Errorf("GET %s: %d %s, want 409 revisions_ahead", path, code, body)
		}
	}
}
