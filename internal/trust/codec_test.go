package trust

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/hostcron/hostcron/internal/wire"
)

type fixture struct {
	enc       []EncryptionKey
	core      ed25519.PrivateKey
	node      ed25519.PrivateKey
	coreCodec *Codec
	nodeCodec *Codec
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newAES(t *testing.T) EncryptionKey {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	k, err := NewEncryptionKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubs(keys ...ed25519.PrivateKey) map[string]ed25519.PublicKey {
	m := map[string]ed25519.PublicKey{}
	for _, k := range keys {
		p := k.Public().(ed25519.PublicKey)
		m[KeyID(p)] = p
	}
	return m
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{enc: []EncryptionKey{newAES(t)}, core: newKey(t), node: newKey(t)}
	var err error
	if f.coreCodec, err = NewCoreCodec(f.enc, f.core, pubs(f.node)); err != nil {
		t.Fatal(err)
	}
	if f.nodeCodec, err = NewNodeCodec(f.enc, f.node, pubs(f.core), 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	return f
}

// reconcileOn is the context both ends build for node n's Reconcile.
func reconcileOn(n string) converter.ActivitySerializationContext {
	return converter.ActivitySerializationContext{Namespace: "default", WorkflowID: "converge-node-" + n,
		WorkflowType: "ConvergeNode", ActivityType: "Reconcile", TaskQueue: "node-" + n}
}

var sampleJobs = []wire.Job{{ID: "0b7c6a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21", Tenant: "acme", User: "acme",
	Command: "php artisan schedule:run --secret=hunter2"}}

// send encodes v as the core does for an activity on node n (the client
// wraps every converter with MakeTransferAware, so the tests do too).
func send(t *testing.T, f fixture, n string, v any) *commonpb.Payloads {
	t.Helper()
	dc := converter.WithDataConverterSerializationContext(converter.MakeTransferAware(CoreDataConverter(f.coreCodec)), reconcileOn(n))
	p, err := dc.ToPayloads(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// receive decodes as node n's activity worker does.
func receive(f fixture, n string, p *commonpb.Payloads) ([]wire.Job, error) {
	dc := converter.WithDataConverterSerializationContext(converter.MakeTransferAware(NodeDataConverter(f.nodeCodec)), reconcileOn(n))
	var jobs []wire.Job
	err := dc.FromPayloads(p, &jobs)
	return jobs, err
}

func TestRoundTripCoreToNode(t *testing.T) {
	f := newFixture(t)
	p := send(t, f, "n1", sampleJobs)
	for _, pl := range p.Payloads {
		if strings.Contains(string(pl.Data), "hunter2") || strings.Contains(string(pl.Data), "acme") {
			t.Fatal("the sealed payload holds the command in clear")
		}
		if string(pl.Metadata[converter.MetadataEncoding]) != EncodingSealed || string(pl.Metadata[MetadataKeyID]) != f.enc[0].ID {
			t.Fatalf("metadata %v", pl.Metadata)
		}
	}
	got, err := receive(f, "n1", p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Command != sampleJobs[0].Command {
		t.Fatalf("got %+v", got)
	}
}

func TestRoundTripNodeToCore(t *testing.T) {
	f := newFixture(t)
	rep := wire.NodeReport{Written: []string{"cron-acme-x"}}
	nodeDC := converter.WithDataConverterSerializationContext(NodeDataConverter(f.nodeCodec), reconcileOn("n1"))
	p, err := nodeDC.ToPayload(rep)
	if err != nil {
		t.Fatal(err)
	}
	// The core decodes results again on every replay, years later: no
	// freshness bound there.
	f.coreCodec.now = func() time.Time { return time.Now().Add(365 * 24 * time.Hour) }
	// The workflow decodes an activity's result in that activity's context.
	var got wire.NodeReport
	coreDC := converter.WithDataConverterSerializationContext(CoreDataConverter(f.coreCodec), reconcileOn("n1"))
	if err := coreDC.FromPayload(p, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Written) != 1 {
		t.Fatalf("got %+v", got)
	}
}

// The attacks: each one is a payload a tenant process on the node (or
// anyone who reaches the Temporal frontend) could put on a task queue.
func TestNodeRefuses(t *testing.T) {
	f := newFixture(t)
	plainDC := converter.GetDefaultDataConverter()
	tenant := newKey(t)
	tenantCore, err := NewCoreCodec(f.enc, tenant, nil) // knows the shared AES key, not the core's signing key
	if err != nil {
		t.Fatal(err)
	}
	otherAES, err := NewCoreCodec([]EncryptionKey{newAES(t)}, f.core, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		input func() *commonpb.Payloads
		node  string
		want  error
	}{
		{"unsigned plain JSON", func() *commonpb.Payloads { p, _ := plainDC.ToPayloads(sampleJobs); return p }, "n1", ErrUnsigned},
		{"flipped byte", func() *commonpb.Payloads {
			p := send(t, f, "n1", sampleJobs)
			p.Payloads[0].Data[len(p.Payloads[0].Data)/2] ^= 1
			return p
		}, "n1", ErrUndecryptable},
		{"signed by a key the node does not trust", func() *commonpb.Payloads {
			p, _ := converter.WithDataConverterSerializationContext(CoreDataConverter(tenantCore), reconcileOn("n1")).ToPayloads(sampleJobs)
			return p
		}, "n1", ErrUnknownSigner},
		{"sealed with another encryption key", func() *commonpb.Payloads {
			p, _ := converter.WithDataConverterSerializationContext(CoreDataConverter(otherAES), reconcileOn("n1")).ToPayloads(sampleJobs)
			return p
		}, "n1", ErrUnknownKey},
		{"replayed onto another node's queue", func() *commonpb.Payloads { return send(t, f, "n1", sampleJobs) }, "n2", ErrBinding},
		{"empty input (would be Reconcile(nil))", func() *commonpb.Payloads { return &commonpb.Payloads{} }, "n1", ErrUnsigned},
		{"no input at all", func() *commonpb.Payloads { return nil }, "n1", ErrUnsigned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := receive(f, c.node, c.input())
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func TestNodeRefusesForgedSignature(t *testing.T) {
	f := newFixture(t)
	env := envelope{Signer: KeyID(f.core.Public().(ed25519.PublicKey)), SignedAt: time.Now().UnixMilli(),
		Binding: bindingOf(reconcileOn("n1")), Data: []byte(`[]`),
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte(converter.MetadataEncodingJSON)}}
	env.Sig = ed25519.Sign(newKey(t), signedBytes(env)) // claims the core's id, signed by another key
	err := f.nodeCodec.WithSerializationContext(reconcileOn("n1")).(*Codec).verify(env)
	if !errors.Is(err, ErrBadSignature) {
		t.Fatalf("err = %v", err)
	}
	// A genuine signature over other content does not transfer either.
	env.Sig = ed25519.Sign(f.core, signedBytes(env))
	env.Data = []byte(`null`)
	if err := f.nodeCodec.WithSerializationContext(reconcileOn("n1")).(*Codec).verify(env); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("err = %v", err)
	}
}

func TestNodeFreshness(t *testing.T) {
	f := newFixture(t)
	p := send(t, f, "n1", sampleJobs)
	// A retry within the activity's schedule-to-close re-delivers the same
	// payload: accepted.
	f.nodeCodec.now = func() time.Time { return time.Now().Add(9 * time.Minute) }
	if _, err := receive(f, "n1", p); err != nil {
		t.Fatalf("retry within max age: %v", err)
	}
	f.nodeCodec.now = func() time.Time { return time.Now().Add(11 * time.Minute) }
	if _, err := receive(f, "n1", p); !errors.Is(err, ErrStale) {
		t.Fatalf("replay after max age: err = %v", err)
	}
}

func TestNodeRefusesWorkflowPayload(t *testing.T) {
	f := newFixture(t)
	wf := converter.WorkflowSerializationContext{Namespace: "default", WorkflowID: "x"}
	p, err := converter.WithDataConverterSerializationContext(CoreDataConverter(f.coreCodec), wf).ToPayloads(sampleJobs)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []wire.Job
	err = converter.WithDataConverterSerializationContext(NodeDataConverter(f.nodeCodec), wf).FromPayloads(p, &jobs)
	if !errors.Is(err, ErrBinding) {
		t.Fatalf("err = %v", err)
	}
}

func TestCoreRefusesUnknownNode(t *testing.T) {
	f := newFixture(t)
	rogue, err := NewNodeCodec(f.enc, newKey(t), pubs(f.core), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NodeDataConverter(rogue).ToPayload(wire.NodeReport{})
	if err != nil {
		t.Fatal(err)
	}
	var rep wire.NodeReport
	if err := CoreDataConverter(f.coreCodec).FromPayload(p, &rep); !errors.Is(err, ErrUnknownSigner) {
		t.Fatalf("err = %v", err)
	}
	plain, _ := converter.GetDefaultDataConverter().ToPayload(wire.NodeReport{})
	if err := CoreDataConverter(f.coreCodec).FromPayload(plain, &rep); !errors.Is(err, ErrUnsigned) {
		t.Fatalf("unsigned: err = %v", err)
	}
}

// Rotation: a codec holding old and new keys opens payloads of both.
func TestRotation(t *testing.T) {
	f := newFixture(t)
	oldPayload := send(t, f, "n1", sampleJobs)
	newAESKey := newAES(t)
	rotated, err := NewNodeCodec([]EncryptionKey{newAESKey, f.enc[0]}, f.node, pubs(f.core, newKey(t)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f.nodeCodec = rotated
	if _, err := receive(f, "n1", oldPayload); err != nil {
		t.Fatalf("old key during rotation: %v", err)
	}
}

// A node's key is trusted by the core for node activities' results only:
// with its client certificate, a compromised node could otherwise poll the
// core's task queue and complete LoadJob or DesiredForNode with jobs of
// its choosing, or start a workflow, and the core would then sign that
// work for every node of the shard.
func TestCoreTrustsNodeKeyOnlyForNodeResults(t *testing.T) {
	f := newFixture(t)
	evil := wire.JobPlan{Exists: true, Job: sampleJobs[0]}
	loadJob := converter.ActivitySerializationContext{Namespace: "default", WorkflowID: "cronjob-x",
		WorkflowType: "JobWorkflow", ActivityType: "LoadJob", TaskQueue: "hostcron-core"}
	wf := converter.WorkflowSerializationContext{Namespace: "default", WorkflowID: "cronjob-x"}
	for name, sc := range map[string]converter.SerializationContext{"core activity": loadJob, "workflow": wf} {
		nodeDC := converter.WithDataConverterSerializationContext(NodeDataConverter(f.nodeCodec), sc)
		coreDC := converter.WithDataConverterSerializationContext(CoreDataConverter(f.coreCodec), sc)
		p, err := nodeDC.ToPayload(evil)
		if err != nil {
			t.Fatal(err)
		}
		var got wire.JobPlan
		if err := coreDC.FromPayload(p, &got); !errors.Is(err, ErrBinding) {
			t.Errorf("%s: node-signed payload: err = %v, want ErrBinding", name, err)
		}
	}
	// A node's results on its own queue, and its (unbound) failure
	// messages, still open.
	for _, sc := range []converter.SerializationContext{reconcileOn("n1"), nil} {
		nodeDC, coreDC := NodeDataConverter(f.nodeCodec), CoreDataConverter(f.coreCodec)
		if sc != nil {
			nodeDC = converter.WithDataConverterSerializationContext(nodeDC, sc)
			coreDC = converter.WithDataConverterSerializationContext(coreDC, sc)
		}
		p, err := nodeDC.ToPayload(wire.NodeReport{})
		if err != nil {
			t.Fatal(err)
		}
		var rep wire.NodeReport
		if err := coreDC.FromPayload(p, &rep); err != nil {
			t.Errorf("node result in %v: %v", sc, err)
		}
	}
	// The core's own payloads stay valid anywhere (replays, workflow inputs).
	p, err := converter.WithDataConverterSerializationContext(CoreDataConverter(f.coreCodec), loadJob).ToPayload(evil)
	if err != nil {
		t.Fatal(err)
	}
	var got wire.JobPlan
	if err := CoreDataConverter(f.coreCodec).FromPayload(p, &got); err != nil {
		t.Errorf("core-signed: %v", err)
	}
}
