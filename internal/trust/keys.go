// Package trust makes a node apply only what the core decided: every
// Temporal payload between core and nodes is encrypted with a shared
// AES-256-GCM key (histories hold no tenant command in clear) and signed
// with Ed25519 (the core's key for what the core sends, a node's key for
// what the node answers). Admit is the node's last check on a desired job,
// and ClientTLS the mutual TLS towards the Temporal frontend.
package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
)

// EncryptionKey is one AES-256 key and its id.
type EncryptionKey struct {
	ID  string
	Key []byte // 32 bytes
}

// NewEncryptionKey derives the key's id from its bytes, so an id can never
// name a different key than the one that sealed a payload.
func NewEncryptionKey(key []byte) (EncryptionKey, error) {
	if len(key) != 32 {
		return EncryptionKey{}, fmt.Errorf("encryption key: %d bytes, want 32 (AES-256)", len(key))
	}
	sum := sha256.Sum256(append([]byte("hostcron-trust-aes-id\x00"), key...))
	return EncryptionKey{ID: "aes-" + hex.EncodeToString(sum[:8]), Key: key}, nil
}

// KeyID names an Ed25519 public key: a hash prefix, so it is stable and
// cannot be chosen by whoever presents a signature.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed-" + hex.EncodeToString(sum[:8])
}

// LoadEncryptionKeys reads AES keys (64 hex digits per file, as
// `openssl rand -hex 32` writes them). The first one seals; all of them
// open, which is how a key is rotated.
func LoadEncryptionKeys(paths ...string) ([]EncryptionKey, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("encryption keys: none configured")
	}
	keys := make([]EncryptionKey, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read encryption key: %w", err)
		}
		raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("encryption key %s: not hex: %w", p, err)
		}
		k, err := NewEncryptionKey(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// LoadSigningKey reads an Ed25519 private key in PKCS#8 PEM
// (`openssl genpkey -algorithm ed25519`).
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: %T is not Ed25519", path, k)
	}
	return priv, nil
}

// LoadPublicKeys reads Ed25519 public keys in PKIX PEM
// (`openssl pkey -pubout`), keyed by KeyID.
func LoadPublicKeys(paths ...string) (map[string]ed25519.PublicKey, error) {
	out := make(map[string]ed25519.PublicKey, len(paths))
	for _, p := range paths {
		der, err := readPEM(p, "PUBLIC KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParsePKIXPublicKey(der)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %w", p, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key %s: %T is not Ed25519", p, k)
		}
		out[KeyID(pub)] = pub
	}
	return out, nil
}

func readPEM(path, typ string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("key %s: no %q PEM block", path, typ)
	}
	return blk.Bytes, nil
}
