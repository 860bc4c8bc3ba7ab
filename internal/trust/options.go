package trust

import (
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// DefaultMaxAge bounds how old a core signature a node accepts. It must
// exceed the core's --node-timeout (every node activity's schedule-to-close
// timeout, within which Temporal re-delivers the same signed payload on
// each retry) plus clock skew.
const DefaultMaxAge = 10 * time.Minute

// MaxMaxAge is the highest max_age a node accepts. A node's tombstones
// (24 h) must outlive any task it may still accept, and a converge's set
// must reach the node well within the age at which the node removes units
// without a revision (unitmgr.LegacyOrphanAge, 1 h); a longer freshness
// bound would also weaken replay protection for no gain.
const MaxMaxAge = time.Hour

// Files names one process's trust material; node.json embeds it as
// "trust", core-api fills it from flags. Empty means no TLS and no codec
// (the development default, logged as a warning by the caller).
type Files struct {
	TLSCert string `json:"tls_cert"` // client certificate for the Temporal frontend
	TLSKey  string `json:"tls_key"`
	TLSCA   string `json:"tls_ca"` // CA of the frontend's certificate
	// PayloadKeys are AES key files; the first seals, all open.
	PayloadKeys []string `json:"payload_keys"`
	// SigningKey is this process's Ed25519 private key.
	SigningKey string `json:"signing_key"`
	// TrustedKeys are public key files or globs: on a node the core's keys,
	// on the core every node's (e.g. /etc/hostcron/trust/nodes/*.pub).
	TrustedKeys []string `json:"trusted_keys"`
	// MaxAge is a node's freshness bound (Go duration, default 10m).
	MaxAge string `json:"max_age"`
}

// Enabled reports whether any trust material is configured.
func (f Files) Enabled() bool {
	return f.TLSCert != "" || f.TLSKey != "" || f.TLSCA != "" || len(f.PayloadKeys) > 0 || f.SigningKey != "" || len(f.TrustedKeys) > 0
}

// ApplyCore sets TLS, DataConverter and FailureConverter for core-api.
func (f Files) ApplyCore(o *client.Options) error {
	return f.apply(o, func(enc []EncryptionKey, sign ed25519.PrivateKey, trusted map[string]ed25519.PublicKey) (converter.DataConverter, error) {
		c, err := NewCoreCodec(enc, sign, trusted)
		if err != nil {
			return nil, err
		}
		return CoreDataConverter(c), nil
	})
}

// ApplyNode sets TLS, DataConverter and FailureConverter for a node agent.
func (f Files) ApplyNode(o *client.Options) error {
	maxAge, err := f.maxAge()
	if err != nil {
		return err
	}
	return f.apply(o, func(enc []EncryptionKey, sign ed25519.PrivateKey, trusted map[string]ed25519.PublicKey) (converter.DataConverter, error) {
		c, err := NewNodeCodec(enc, sign, trusted, maxAge)
		if err != nil {
			return nil, err
		}
		return NodeDataConverter(c), nil
	})
}

// maxAge is a node's freshness bound, for payloads and pages alike.
func (f Files) maxAge() (time.Duration, error) {
	if f.MaxAge == "" {
		return DefaultMaxAge, nil
	}
	d, err := time.ParseDuration(f.MaxAge)
	if err != nil || d <= 0 || d > MaxMaxAge {
		return 0, fmt.Errorf("trust: max_age %q: want a positive duration of at most %s", f.MaxAge, MaxMaxAge)
	}
	return d, nil
}

// PageVerifier is how a node checks the desired-set pages it reads from
// the core API (VerifyPage): the keys and freshness bound its payload
// codec uses.
type PageVerifier struct {
	Core   map[string]ed25519.PublicKey // the core's keys (trusted_keys)
	MaxAge time.Duration
	Now    func() time.Time // nil: time.Now
}

// Verify is VerifyPage with the verifier's keys and bound.
func (v PageVerifier) Verify(req PageRequest, body []byte, header string) error {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	return VerifyPage(v.Core, v.MaxAge, req, body, header, now())
}

// NodePages is a node agent's PageVerifier, nil when no trust material is
// configured: pages are then taken unsigned, as payloads are without the
// codec (development). With any of it, all of it is required, as for
// ApplyNode.
func (f Files) NodePages() (*PageVerifier, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if err := f.complete(); err != nil {
		return nil, err
	}
	maxAge, err := f.maxAge()
	if err != nil {
		return nil, err
	}
	core, err := loadTrusted(f.TrustedKeys)
	if err != nil {
		return nil, err
	}
	return &PageVerifier{Core: core, MaxAge: maxAge}, nil
}

// CorePageKey is the key core-api signs desired-set pages with, its
// payload signing key; nil when no trust material is configured (pages
// go unsigned, as payloads do without the codec). With any of it, all of
// it is required, as for ApplyCore.
func (f Files) CorePageKey() (ed25519.PrivateKey, error) {
	if !f.Enabled() {
		return nil, nil
	}
	if err := f.complete(); err != nil {
		return nil, err
	}
	return LoadSigningKey(f.SigningKey)
}

// complete requires all of the material: half a configuration would
// leave a node believing it is protected when it is not.
func (f Files) complete() error {
	if f.TLSCert == "" || f.TLSKey == "" || f.TLSCA == "" || len(f.PayloadKeys) == 0 || f.SigningKey == "" || len(f.TrustedKeys) == 0 {
		return fmt.Errorf("trust: tls_cert, tls_key, tls_ca, payload_keys, signing_key and trusted_keys are all required")
	}
	return nil
}

type makeDC func([]EncryptionKey, ed25519.PrivateKey, map[string]ed25519.PublicKey) (converter.DataConverter, error)

// apply requires all of the material (complete).
func (f Files) apply(o *client.Options, mk makeDC) error {
	if err := f.complete(); err != nil {
		return err
	}
	tlsCfg, err := ClientTLS(f.TLSCert, f.TLSKey, f.TLSCA)
	if err != nil {
		return err
	}
	enc, err := LoadEncryptionKeys(f.PayloadKeys...)
	if err != nil {
		return err
	}
	sign, err := LoadSigningKey(f.SigningKey)
	if err != nil {
		return err
	}
	trusted, err := loadTrusted(f.TrustedKeys)
	if err != nil {
		return err
	}
	dc, err := mk(enc, sign, trusted)
	if err != nil {
		return err
	}
	o.ConnectionOptions.TLS = tlsCfg
	o.DataConverter = dc
	// Failure messages and stack traces (which name units and reasons)
	// travel as an encoded, hence sealed, payload too.
	o.FailureConverter = temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{
		DataConverter: dc, EncodeCommonAttributes: true})
	return nil
}

func loadTrusted(patterns []string) (map[string]ed25519.PublicKey, error) {
	var paths []string
	for _, p := range patterns {
		m, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("trust: trusted key pattern %q: %w", p, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("trust: trusted key %q: no such file", p)
		}
		paths = append(paths, m...)
	}
	return LoadPublicKeys(paths...)
}
