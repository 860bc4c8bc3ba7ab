// Package nodeconf is a web node's hostcron configuration,
// /etc/hostcron/node.json, shared by the node agent and cron-outcome.
package nodeconf

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/hostcron/hostcron/internal/units"
)

// DefaultPath is where the package installs the configuration.
const DefaultPath = "/etc/hostcron/node.json"

// Config is one node's configuration.
type Config struct {
	APIURL     string `json:"api_url"`    // core API base URL
	Credential string `json:"credential"` // this node's token (from the admin API)
	NodeName   string `json:"node_name"`
	NodeID     string `json:"node_id"`
	SpoolDir   string `json:"spool_dir"` // undelivered outcomes
	SpecDir    string `json:"spec_dir"`  // job specs
	UnitDir    string `json:"unit_dir"`  // where cron units are written
	// Temporal frontend and namespace for the agent's worker.
	TemporalAddress   string `json:"temporal_address"`
	TemporalNamespace string `json:"temporal_namespace"`
	// LokiURL is where the agent ships cron logs ("" = do not ship).
	LokiURL string `json:"loki_url"`
	// Loki credentials: a bearer token, or basic auth; and the Loki tenant
	// (X-Scope-OrgID) the cron logs belong to.
	LokiToken    string `json:"loki_token,omitempty"`
	LokiUsername string `json:"loki_username,omitempty"`
	LokiPassword string `json:"loki_password,omitempty"`
	LokiOrgID    string `json:"loki_org_id,omitempty"`
	StateDir     string `json:"state_dir"` // the agent's own state (journal cursor)
	// WebStorageDir is the shard's shared storage as mounted here: the
	// agent admits only webroots and lock dirs below {it}/{tenant}/.
	WebStorageDir string `json:"web_storage_dir"`
	// DenyAddresses are control-plane IPs or CIDRs (Temporal, Loki, the
	// core's internal endpoints) that tenants' commands must not reach:
	// rendered as IPAddressDeny= into every cron service. Never the core
	// API address cron-outcome reports to (the filter covers the whole
	// unit, its ExecStopPost=+ included).
	DenyAddresses []string `json:"deny_addresses"`
	// Trust is the agent's TLS client certificate for Temporal and its
	// payload keys (empty: in the clear, logged as a warning).
	Trust TrustFiles `json:"trust"`
}

// TrustFiles mirrors trust.Files field for field (the agent converts it),
// so cron-outcome, which reads this file too, does not link Temporal.
type TrustFiles struct {
	TLSCert     string   `json:"tls_cert"`
	TLSKey      string   `json:"tls_key"`
	TLSCA       string   `json:"tls_ca"`
	PayloadKeys []string `json:"payload_keys"`
	SigningKey  string   `json:"signing_key"`
	TrustedKeys []string `json:"trusted_keys"` // the core's public keys
	MaxAge      string   `json:"max_age"`
}

// Load reads the configuration and fills defaults. It refuses a file that
// anyone but its owner may read or write: it holds the node's credential,
// which can report any outcome of the shard's jobs.
func Load(path string) (Config, error) {
	var c Config
	f, err := os.Open(path)
	if err != nil {
		return c, fmt.Errorf("read node config: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return c, fmt.Errorf("read node config: %w", err)
	}
	if err := CheckMode(info.Mode()); err != nil {
		return c, fmt.Errorf("node config %s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return c, fmt.Errorf("read node config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decode node config %s: %w", path, err)
	}
	c.defaults()
	if c.APIURL == "" || c.Credential == "" {
		return c, fmt.Errorf("node config %s: api_url and credential are required", path)
	}
	return c, nil
}

// CheckDenyAddresses checks deny_addresses; the agent calls it before it
// renders units. Load does not: cron-outcome reads the same file, and one
// bad entry must never stop a node from reporting outcomes.
func (c Config) CheckDenyAddresses() error {
	for _, a := range c.DenyAddresses {
		if _, err := units.ParseDenyAddress(a); err != nil {
			return fmt.Errorf("node config deny_addresses: %w", err)
		}
	}
	return nil
}

// CheckMode accepts a regular file without group or other permissions.
func CheckMode(m fs.FileMode) error {
	switch {
	case !m.IsRegular():
		return fmt.Errorf("not a regular file")
	case m.Perm()&0o077 != 0:
		return fmt.Errorf("mode %04o lets others read it; it holds the node credential: chmod 0600", m.Perm())
	}
	return nil
}

// Defaults is the configuration with every default and no credential.
func Defaults() Config {
	var c Config
	c.defaults()
	return c
}

func (c *Config) defaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.SpoolDir, "/var/spool/hostcron/outcomes")
	def(&c.SpecDir, "/var/lib/hostcron/jobs")
	def(&c.UnitDir, "/etc/systemd/system")
	def(&c.StateDir, "/var/lib/hostcron")
	def(&c.TemporalNamespace, "default")
}
