package trust

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// Payload metadata of a sealed payload. Only the key id is in clear: the
// original metadata (encoding, type) is sealed with the data.
const (
	EncodingSealed = "binary/hostcron-sealed-v1"
	MetadataKeyID  = "hostcron-key-id"
	domain         = "hostcron-trust-v1\x00"
)

// Why a payload is refused; errors.Is works on what Decode returns.
var (
	ErrUnsigned      = errors.New("payload is not sealed and signed by hostcron")
	ErrUnknownKey    = errors.New("payload sealed with an unknown encryption key")
	ErrUndecryptable = errors.New("payload does not decrypt (tampered or wrong key)")
	ErrUnknownSigner = errors.New("payload signed by a key this process does not trust")
	ErrBadSignature  = errors.New("payload signature does not verify")
	ErrStale         = errors.New("payload signature is too old or from the future")
	ErrBinding       = errors.New("payload was signed for another workflow, activity or task queue")
)

// envelope is what the AES-GCM ciphertext holds.
type envelope struct {
	Signer   string            `json:"signer"`    // KeyID of the signing key
	SignedAt int64             `json:"signed_at"` // unix milliseconds
	Binding  string            `json:"binding"`   // see bindingOf
	Metadata map[string][]byte `json:"metadata"`  // of the original payload
	Data     []byte            `json:"data"`
	Sig      []byte            `json:"sig"`
}

// Role is what a codec trusts and how strictly it checks.
type Role struct {
	// MaxAge refuses signatures older than this (0: no bound). The node sets
	// it; the core cannot, since its workflow worker decodes payloads again
	// whenever it replays a history, however old.
	MaxAge time.Duration
	// StrictBinding requires every decoded payload to be an activity
	// payload signed for exactly the decoding activity: workflow, activity
	// type and task queue. The node sets it.
	StrictBinding bool
}

// clockSkew is how far in the future a signature may be dated.
const clockSkew = time.Minute

// Codec is a converter.PayloadCodec that seals (encrypts and signs) what
// it encodes and opens (decrypts and verifies) what it decodes.
type Codec struct {
	seal     EncryptionKey
	aeads    map[string]cipher.AEAD
	signer   ed25519.PrivateKey
	signerID string
	trusted  map[string]ed25519.PublicKey
	// resultsOnly are trusted keys (the nodes', on the core) accepted only
	// for what a node legitimately signs: the result of an activity on a
	// node's task queue, decoded in that very activity's context.
	resultsOnly map[string]bool
	role        Role
	binding     string
	now         func() time.Time
}

var (
	_ converter.PayloadCodec                         = (*Codec)(nil)
	_ converter.PayloadCodecWithSerializationContext = (*Codec)(nil)
)

// NewCodec seals with enc[0] and signer, opens with any of enc and accepts
// signatures of the trusted keys only.
func NewCodec(enc []EncryptionKey, signer ed25519.PrivateKey, trusted map[string]ed25519.PublicKey, role Role) (*Codec, error) {
	if len(enc) == 0 || len(signer) != ed25519.PrivateKeySize || len(trusted) == 0 {
		return nil, fmt.Errorf("trust codec: needs an encryption key, a signing key and at least one trusted key")
	}
	c := &Codec{seal: enc[0], aeads: map[string]cipher.AEAD{}, signer: signer,
		signerID: KeyID(signer.Public().(ed25519.PublicKey)), trusted: trusted, role: role, now: time.Now}
	for _, k := range enc {
		block, err := aes.NewCipher(k.Key)
		if err != nil {
			return nil, fmt.Errorf("trust codec: key %s: %w", k.ID, err)
		}
		if c.aeads[k.ID], err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("trust codec: key %s: %w", k.ID, err)
		}
	}
	return c, nil
}

// NewCoreCodec is the core's codec: it signs with the core's key and
// accepts its own signatures (workflow inputs, signals, its own
// activities) and those of the known nodes (node activity results).
func NewCoreCodec(enc []EncryptionKey, core ed25519.PrivateKey, nodes map[string]ed25519.PublicKey) (*Codec, error) {
	trusted := map[string]ed25519.PublicKey{}
	for id, k := range nodes {
		trusted[id] = k
	}
	pub := core.Public().(ed25519.PublicKey)
	trusted[KeyID(pub)] = pub
	c, err := NewCodec(enc, core, trusted, Role{})
	if err != nil {
		return nil, err
	}
	c.resultsOnly = map[string]bool{}
	for id := range nodes {
		if id != KeyID(pub) {
			c.resultsOnly[id] = true
		}
	}
	return c, nil
}

// NewNodeCodec is a node's codec: it signs its answers with the node's key
// and accepts only the core's keys (several during a rotation), fresh and
// bound to the activity that decodes them.
func NewNodeCodec(enc []EncryptionKey, node ed25519.PrivateKey, core map[string]ed25519.PublicKey, maxAge time.Duration) (*Codec, error) {
	if maxAge <= 0 {
		return nil, fmt.Errorf("trust codec: a node needs a positive max age")
	}
	return NewCodec(enc, node, core, Role{MaxAge: maxAge, StrictBinding: true})
}

// WithSerializationContext binds signatures to where the SDK encodes or
// decodes: the same workflow, activity type and task queue on both ends.
func (c *Codec) WithSerializationContext(sc converter.SerializationContext) converter.PayloadCodec {
	cp := *c
	cp.binding = bindingOf(sc)
	return &cp
}

// bindingOf spells a serialization context. The workflow side and the
// activity worker build the same ActivitySerializationContext (SDK
// internal/workflow.go and internal_task_handlers.go), so a payload
// scheduled for node A's Reconcile does not verify as node B's, nor as
// another activity's input.
func bindingOf(sc converter.SerializationContext) string {
	switch v := sc.(type) {
	case converter.ActivitySerializationContext:
		return fmt.Sprintf("activity\x00%s\x00%s\x00%s\x00%s\x00%s", v.Namespace, v.WorkflowID, v.WorkflowType, v.ActivityType, v.TaskQueue)
	case converter.WorkflowSerializationContext:
		return fmt.Sprintf("workflow\x00%s\x00%s", v.Namespace, v.WorkflowID)
	default:
		return ""
	}
}

// Encode seals every payload.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		sealed, err := c.sealOne(p)
		if err != nil {
			return nil, fmt.Errorf("trust: seal payload %d: %w", i, err)
		}
		out[i] = sealed
	}
	return out, nil
}

// Decode opens every payload and refuses the whole batch if one fails.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		opened, err := c.openOne(p)
		if err != nil {
			return nil, fmt.Errorf("trust: refused payload %d: %w", i, err)
		}
		out[i] = opened
	}
	return out, nil
}

func (c *Codec) sealOne(p *commonpb.Payload) (*commonpb.Payload, error) {
	env := envelope{Signer: c.signerID, SignedAt: c.now().UnixMilli(), Binding: c.binding,
		Metadata: p.GetMetadata(), Data: p.GetData()}
	env.Sig = ed25519.Sign(c.signer, signedBytes(env))
	plain, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("marshal envelope: %w", err)
	}
	aead := c.aeads[c.seal.ID]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return &commonpb.Payload{
		Metadata: map[string][]byte{
			converter.MetadataEncoding: []byte(EncodingSealed),
			MetadataKeyID:              []byte(c.seal.ID),
		},
		Data: aead.Seal(nonce, nonce, plain, aad(c.seal.ID)),
	}, nil
}

func (c *Codec) openOne(p *commonpb.Payload) (*commonpb.Payload, error) {
	if string(p.GetMetadata()[converter.MetadataEncoding]) != EncodingSealed {
		return nil, ErrUnsigned
	}
	env, err := c.decrypt(p)
	if err != nil {
		return nil, err
	}
	if err := c.verify(env); err != nil {
		return nil, err
	}
	return &commonpb.Payload{Metadata: env.Metadata, Data: env.Data}, nil
}

func (c *Codec) decrypt(p *commonpb.Payload) (envelope, error) {
	var env envelope
	id := string(p.GetMetadata()[MetadataKeyID])
	aead, ok := c.aeads[id]
	if !ok {
		return env, fmt.Errorf("%w: %q", ErrUnknownKey, id)
	}
	data := p.GetData()
	if len(data) < aead.NonceSize() {
		return env, ErrUndecryptable
	}
	plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], aad(id))
	if err != nil {
		return env, ErrUndecryptable
	}
	if err := json.Unmarshal(plain, &env); err != nil {
		return env, fmt.Errorf("%w: envelope: %v", ErrUndecryptable, err)
	}
	return env, nil
}

// verify checks the signature first, so nothing else in the envelope is
// believed before it is known to come from a trusted key.
func (c *Codec) verify(env envelope) error {
	pub, ok := c.trusted[env.Signer]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownSigner, env.Signer)
	}
	if !ed25519.Verify(pub, signedBytes(env), env.Sig) {
		return fmt.Errorf("%w (signer %s)", ErrBadSignature, env.Signer)
	}
	if c.resultsOnly[env.Signer] && (env.Binding != c.binding || (c.binding != "" && !isNodeActivityBinding(c.binding))) {
		// Without this a node could complete the core's own activities
		// (LoadJob, DesiredSetForNode) or start workflows with its key, and
		// the core would sign that work for other nodes. Unbound ("") is
		// what the SDK's failure converter uses on both ends (it takes no
		// serialization context): a node's failure messages, never work.
		return fmt.Errorf("%w: node key %s signed for %q, decoded in %q", ErrBinding, env.Signer, printable(env.Binding), printable(c.binding))
	}
	if c.role.StrictBinding && (env.Binding != c.binding || !isActivityBinding(c.binding)) {
		return fmt.Errorf("%w: signed for %q, decoded in %q", ErrBinding, printable(env.Binding), printable(c.binding))
	}
	if c.role.MaxAge > 0 {
		age := c.now().Sub(time.UnixMilli(env.SignedAt))
		if age > c.role.MaxAge || age < -clockSkew {
			return fmt.Errorf("%w: signed %s ago, max %s", ErrStale, age.Round(time.Second), c.role.MaxAge)
		}
	}
	return nil
}

func isActivityBinding(b string) bool { return len(b) > 9 && b[:9] == "activity\x00" }

// NodeQueuePrefix starts every node agent's task queue
// (workflows.NodeTaskQueue).
const NodeQueuePrefix = "node-"

// isNodeActivityBinding: an activity binding whose task queue (its last
// field) is a node's.
func isNodeActivityBinding(b string) bool {
	i := strings.LastIndexByte(b, 0)
	return isActivityBinding(b) && i >= 0 && strings.HasPrefix(b[i+1:], NodeQueuePrefix)
}

func printable(b string) string {
	out := []byte(b)
	for i := range out {
		if out[i] == 0 {
			out[i] = '|'
		}
	}
	return string(out)
}

// aad ties the ciphertext to its key id, so the id in clear cannot be
// swapped.
func aad(keyID string) []byte { return []byte(domain + keyID) }

// signedBytes is an unambiguous spelling of everything the signature
// covers: every field is length-prefixed, metadata in key order.
func signedBytes(env envelope) []byte {
	b := []byte(domain)
	field := func(v []byte) {
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	field([]byte(env.Signer))
	b = binary.BigEndian.AppendUint64(b, uint64(env.SignedAt))
	field([]byte(env.Binding))
	keys := make([]string, 0, len(env.Metadata))
	for k := range env.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		field([]byte(k))
		field(env.Metadata[k])
	}
	field(env.Data)
	return b
}
