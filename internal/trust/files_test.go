package trust

import (
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/hostcron/hostcron/internal/wire"
)

// script runs scripts/NAME DIR ARGS... (openssl is required).
func script(t *testing.T, name, dir string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	out, err := exec.Command(filepath.Join("..", "..", "scripts", name), append([]string{dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// The files keys.sh writes load and work end to end.
func TestKeysFromScript(t *testing.T) {
	dir := t.TempDir()
	script(t, "keys.sh", dir, "node1")
	enc, err := LoadEncryptionKeys(filepath.Join(dir, "payload.aes"))
	if err != nil {
		t.Fatal(err)
	}
	core, err := LoadSigningKey(filepath.Join(dir, "core-sign.key"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := LoadSigningKey(filepath.Join(dir, "node-node1-sign.key"))
	if err != nil {
		t.Fatal(err)
	}
	corePub, err := LoadPublicKeys(filepath.Join(dir, "core-sign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	nodePubs, err := LoadPublicKeys(filepath.Join(dir, "node-node1-sign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{enc: enc, core: core, node: node}
	if f.coreCodec, err = NewCoreCodec(enc, core, nodePubs); err != nil {
		t.Fatal(err)
	}
	if f.nodeCodec, err = NewNodeCodec(enc, node, corePub, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := receive(f, "n1", send(t, f, "n1", sampleJobs)); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second run keeps every key.
	before, _ := os.ReadFile(filepath.Join(dir, "core-sign.key"))
	script(t, "keys.sh", dir, "node1", "node2")
	after, _ := os.ReadFile(filepath.Join(dir, "core-sign.key"))
	if string(before) != string(after) {
		t.Fatal("keys.sh replaced an existing key")
	}
	// A private key is not a public key, and a public key file of the
	// wrong kind is refused.
	if _, err := LoadPublicKeys(filepath.Join(dir, "core-sign.key")); err == nil {
		t.Fatal("loaded a private key as public")
	}
}

// Mutual TLS with the certificates certs.sh writes: a node certificate is
// accepted, a client without one or with one from another CA is not.
func TestClientTLSWithScriptCerts(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	script(t, "certs.sh", dir, "node1")
	script(t, "certs.sh", other, "node1")
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "temporal.crt"), filepath.Join(dir, "temporal.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := loadPool(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		_, err = c.Read(buf) // TLS 1.3 reports a refused client certificate on the first read
		return err
	}
	good, err := ClientTLS(filepath.Join(dir, "node-node1.crt"), filepath.Join(dir, "node-node1.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(good); err != nil {
		t.Fatalf("node certificate refused: %v", err)
	}
	foreign, err := ClientTLS(filepath.Join(other, "node-node1.crt"), filepath.Join(other, "node-node1.key"), filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(foreign); err == nil {
		t.Fatal("certificate of another CA accepted")
	}
	noCert := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if err := dial(noCert); err == nil {
		t.Fatal("client without certificate accepted")
	}
	// And the client refuses a server its CA did not sign.
	wrongCA, err := ClientTLS(filepath.Join(dir, "node-node1.crt"), filepath.Join(dir, "node-node1.key"), filepath.Join(other, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(wrongCA); err == nil {
		t.Fatal("client accepted a server of another CA")
	}
}

// The option helpers the binaries call: everything from files (keys.sh
// and certs.sh share one dir), and the core's converter talks to the
// node's; half a configuration is refused.
func TestApplyOptions(t *testing.T) {
	dir := t.TempDir()
	script(t, "keys.sh", dir, "node1")
	script(t, "certs.sh", dir, "node1")
	j := func(n string) string { return filepath.Join(dir, n) }
	core := Files{TLSCert: j("core.crt"), TLSKey: j("core.key"), TLSCA: j("ca.crt"), PayloadKeys: []string{j("payload.aes")},
		SigningKey: j("core-sign.key"), TrustedKeys: []string{j("node-*-sign.pub")}}
	node := Files{TLSCert: j("node-node1.crt"), TLSKey: j("node-node1.key"), TLSCA: j("ca.crt"), PayloadKeys: []string{j("payload.aes")},
		SigningKey: j("node-node1-sign.key"), TrustedKeys: []string{j("core-sign.pub")}, MaxAge: "5m"}
	var co, no client.Options
	if err := core.ApplyCore(&co); err != nil {
		t.Fatal(err)
	}
	if err := node.ApplyNode(&no); err != nil {
		t.Fatal(err)
	}
	if co.ConnectionOptions.TLS == nil || no.ConnectionOptions.TLS == nil || co.FailureConverter == nil {
		t.Fatal("TLS or failure converter not set")
	}
	ctx := reconcileOn("n1")
	p, err := converter.WithDataConverterSerializationContext(co.DataConverter, ctx).ToPayloads(sampleJobs)
	if err != nil {
		t.Fatal(err)
	}
	var got []wire.Job
	if err := converter.WithDataConverterSerializationContext(no.DataConverter, ctx).FromPayloads(p, &got); err != nil || len(got) != 1 {
		t.Fatalf("node decode: %v %v", got, err)
	}
	half := node
	half.TLSCert = ""
	if err := half.ApplyNode(&client.Options{}); err == nil {
		t.Fatal("half a configuration accepted")
	}
	for _, bad := range []string{"forever", "-1m", "61m", "24h"} {
		node.MaxAge = bad
		if err := node.ApplyNode(&client.Options{}); err == nil {
			t.Fatalf("bad max_age %q accepted", bad)
		}
	}
	node.MaxAge = "1h"
	if err := node.ApplyNode(&client.Options{}); err != nil {
		t.Fatalf("max_age 1h: %v", err)
	}

	// Pages: the core signs with its payload signing key, the node checks
	// with its trusted keys and max_age; the same all-or-nothing rule.
	key, err := core.CorePageKey()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := node.NodePages()
	if err != nil || pages == nil || pages.MaxAge != time.Hour {
		t.Fatalf("node pages: %+v, %v; want a verifier with max age 1h", pages, err)
	}
	req := PageRequest{Node: "n1", Limit: 500}
	if err := pages.Verify(req, []byte(`{}`), SignPage(key, req, []byte(`{}`), time.Now())); err != nil {
		t.Fatalf("page signed by the core from files: %v", err)
	}
	if _, err := half.NodePages(); err == nil {
		t.Fatal("half a configuration accepted for pages")
	}
	if k, err := (Files{}).CorePageKey(); k != nil || err != nil {
		t.Fatalf("no trust material: core page key %v, %v; want none", k, err)
	}
	if v, err := (Files{}).NodePages(); v != nil || err != nil {
		t.Fatalf("no trust material: node page verifier %v, %v; want none", v, err)
	}
}
