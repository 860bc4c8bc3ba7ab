// Package nodeconf is a web node's hostcron configuration,
// /etc/hostcron/node.json, shared by the node agent and cron-outcome.
package nodeconf

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

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
	// MetricsAddr is where the agent serves /metrics (host:port, default
	// DefaultMetricsAddr, on loopback; "off": not served).
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// WebStorageDir is the shard's shared storage as mounted here: the
	// agent admits only webroots and lock dirs below {it}/{tenant}/.
	WebStorageDir string `json:"web_storage_dir"`
	// DenyAddresses are control-plane IPs or CIDRs (Temporal, Loki, the
	// core's internal endpoints) that tenants' commands must not reach:
	// rendered as IPAddressDeny= into every cron service. Never the core
	// API address cron-outcome reports to (the filter covers the whole
	// unit, its ExecStopPost=+ included).
	DenyAddresses []string `json:"deny_addresses"`
	// DesiredPageSize is how many jobs a page holds when the agent reads
	// its desired set from the core in a converge (0: wire.DesiredPageSize;
	// above wire.MaxDesiredPageSize the core's bound is used).
	DesiredPageSize int `json:"desired_page_size,omitempty"`
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
//
// Beyond each entry's spelling (units.ParseDenyAddress) it holds the list
// against the addresses this file names, resolved now: every address of
// the Temporal frontend and of Loki must be denied, and none of the core
// API's (cron-outcome reports to it from inside the unit, whose whole
// cgroup the filter covers) nor of a DNS resolver in /etc/resolv.conf
// (tenants' commands resolve names). A control-plane address on loopback
// cannot be denied (units.ParseDenyAddress says why): it is returned as a
// warning, for the operator's firewall (docs/semantics.md).
func (c Config) CheckDenyAddresses(ctx context.Context) (warnings []string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.checkDenyAddresses(ctx, net.DefaultResolver.LookupNetIP, resolvConfNameservers(ResolvConf))
}

// ResolvConf is where the node's DNS resolvers are listed.
const ResolvConf = "/etc/resolv.conf"

// lookupFunc resolves a host name (net.Resolver.LookupNetIP's shape).
type lookupFunc func(ctx context.Context, network, host string) ([]netip.Addr, error)

func (c Config) checkDenyAddresses(ctx context.Context, lookup lookupFunc, nameservers []netip.Addr) ([]string, error) {
	if len(c.DenyAddresses) > units.MaxDenyAddresses {
		return nil, fmt.Errorf("node config deny_addresses: %d entries, at most %d", len(c.DenyAddresses), units.MaxDenyAddresses)
	}
	var deny []netip.Prefix
	for _, a := range c.DenyAddresses {
		canon, err := units.ParseDenyAddress(a)
		if err != nil {
			return nil, fmt.Errorf("node config deny_addresses: %w", err)
		}
		p, err := netip.ParsePrefix(canon)
		if err != nil { // a single address
			ip := netip.MustParseAddr(canon)
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		deny = append(deny, p)
	}
	denied := func(ip netip.Addr) (netip.Prefix, bool) {
		for _, p := range deny {
			if p.Contains(ip.Unmap()) {
				return p, true
			}
		}
		return netip.Prefix{}, false
	}
	var warnings []string
	// What tenants must not reach.
	for _, ep := range []struct{ field, host string }{
		{"temporal_address", hostOfAddress(c.TemporalAddress)},
		{"loki_url", hostOfURL(c.LokiURL)},
	} {
		if ep.host == "" {
			continue
		}
		ips, err := resolve(ctx, lookup, ep.host)
		if err != nil {
			return nil, fmt.Errorf("node config %s: cannot check deny_addresses against it: %w", ep.field, err)
		}
		for _, ip := range ips {
			switch {
			case ip.IsLoopback() || ip.IsUnspecified():
				warnings = append(warnings, fmt.Sprintf("%s %s is on loopback, which IPAddressDeny= cannot deny without cutting tenants off their local databases: firewall it for tenant users", ep.field, ip))
				continue
			}
			if _, ok := denied(ip); !ok {
				return nil, fmt.Errorf("node config deny_addresses does not cover %s %s (%s): tenants' commands could reach it", ep.field, ep.host, ip)
			}
		}
	}
	// What must stay reachable.
	if host := hostOfURL(c.APIURL); host != "" {
		ips, err := resolve(ctx, lookup, host)
		if err != nil {
			return nil, fmt.Errorf("node config api_url: cannot check deny_addresses against it: %w", err)
		}
		for _, ip := range ips {
			if p, ok := denied(ip); ok {
				return nil, fmt.Errorf("node config deny_addresses entry %s covers api_url %s (%s): cron-outcome reports from inside the unit, every outcome would be spooled (put the core API on an address of its own)", p, host, ip)
			}
		}
	}
	for _, ip := range nameservers {
		if p, ok := denied(ip); ok {
			return nil, fmt.Errorf("node config deny_addresses entry %s covers the DNS resolver %s of %s: tenants' commands could not resolve names", p, ip, ResolvConf)
		}
	}
	return warnings, nil
}

// resolve returns host's addresses: host itself when it is an IP literal.
func resolve(ctx context.Context, lookup lookupFunc, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	ips, err := lookup(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", host)
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

func hostOfAddress(hostport string) string {
	if hostport == "" {
		return ""
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return host
}

func hostOfURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// resolvConfNameservers lists the nameserver lines of a resolv.conf; a
// missing or unreadable file lists none.
func resolvConfNameservers(path string) []netip.Addr {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return parseNameservers(string(b))
}

func parseNameservers(conf string) []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		if ip, err := netip.ParseAddr(f[1]); err == nil {
			out = append(out, ip.WithZone("").Unmap())
		}
	}
	return out
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
	def(&c.MetricsAddr, DefaultMetricsAddr)
}

// DefaultMetricsAddr is the agent's metrics listener unless metrics_addr
// says otherwise: loopback, for a local Prometheus or agent to scrape.
const DefaultMetricsAddr = "127.0.0.1:9182"

// MetricsOff is the metrics_addr that serves no metrics.
const MetricsOff = "off"
