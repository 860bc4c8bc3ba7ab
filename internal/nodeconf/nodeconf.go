// Package nodeconf is a web node's hostcron configuration,
// /etc/hostcron/node.json, shared by the node agent and cron-outcome.
package nodeconf

import (
	"encoding/json"
	"fmt"
	"os"
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
	LokiURL  string `json:"loki_url"`
	StateDir string `json:"state_dir"` // the agent's own state (journal cursor)
	// WebStorageDir is the shard's shared storage as mounted here: the
	// agent admits only webroots and lock dirs below {it}/{tenant}/.
	WebStorageDir string `json:"web_storage_dir"`
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

// Load reads the configuration and fills defaults.
func Load(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
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
