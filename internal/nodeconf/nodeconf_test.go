package nodeconf

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/units"
)

// TestLoadRefusesReadableCredential: a node.json others can read is
// refused, whatever it holds; 0600 loads.
func TestLoadRefusesReadableCredential(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.json")
	body := []byte(`{"api_url":"http://core","credential":"secret"}`)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o602} {
		if err := os.WriteFile(path, body, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(path, mode)
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "chmod 0600") {
			t.Errorf("mode %04o: err = %v, want refusal", mode, err)
		}
	}
	_ = os.Chmod(path, 0o600)
	c, err := Load(path)
	if err != nil || c.Credential != "secret" || c.SpoolDir == "" {
		t.Errorf("0600: %+v, %v", c, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(dir, "d")); err == nil {
		t.Error("loaded a directory")
	}
}

// TestCheckDenyAddresses: an address IPAddressDeny= would misread, or one
// that cuts tenants off everything, fails the agent's check; Load still
// succeeds, so cron-outcome keeps reporting.
func TestCheckDenyAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.json")
	for addrs, ok := range map[string]bool{
		`["10.20.0.5", "10.30.0.0/16"]`: true,
		`["0.0.0.0/0"]`:                 false,
		`["localhost"]`:                 false,
		`["10.0.0.1 any"]`:              false,
	} {
		body := `{"api_url":"http://10.9.9.9","credential":"secret","deny_addresses":` + addrs + `}`
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatalf("deny_addresses %s: Load: %v (must not fail on them)", addrs, err)
		}
		if _, err := c.checkDenyAddresses(context.Background(), noLookup, nil); (err == nil) != ok {
			t.Errorf("deny_addresses %s: err = %v, want ok %v", addrs, err, ok)
		}
	}
}

func noLookup(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return nil, fmt.Errorf("no such host %s", host)
}

// TestDenyAddressesCoverTheControlPlane: the deny list must cover every
// address of the Temporal frontend and of Loki the config names (by IP or
// by a name, resolved), and must leave the core API cron-outcome reports
// to and the node's DNS resolvers reachable. A loopback control plane
// cannot be denied: a warning, not a refusal.
func TestDenyAddressesCoverTheControlPlane(t *testing.T) {
	hosts := map[string][]netip.Addr{
		"temporal.internal": {netip.MustParseAddr("10.0.10.5"), netip.MustParseAddr("fd00:10::5")},
		"loki.internal":     {netip.MustParseAddr("10.0.10.6")},
		"core.internal":     {netip.MustParseAddr("10.0.20.7")},
		"mapped.internal":   {netip.MustParseAddr("::ffff:10.0.10.5")},
	}
	lookup := func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		if ips, ok := hosts[host]; ok {
			return slices.Clone(ips), nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
	resolvers := parseNameservers("# generated\nsearch internal\nnameserver 10.0.30.53\nnameserver fe80::1%eth0\nnameserver 127.0.0.53\n")
	if want := []netip.Addr{netip.MustParseAddr("10.0.30.53"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("127.0.0.53")}; !slices.Equal(resolvers, want) {
		t.Fatalf("nameservers %v, want %v", resolvers, want)
	}
	prod := Config{APIURL: "https://core.internal:8080", TemporalAddress: "temporal.internal:7233", LokiURL: "http://loki.internal:3100"}
	tests := []struct {
		name     string
		edit     func(c *Config)
		want     string // "" = accepted; else a substring of the error
		warnings int
	}{
		{"both covered by one prefix each family", func(c *Config) { c.DenyAddresses = []string{"10.0.10.0/28", "fd00:10::/64"} }, "", 0},
		{"each address listed", func(c *Config) { c.DenyAddresses = []string{"10.0.10.5", "fd00:10::5", "10.0.10.6"} }, "", 0},
		{"nothing denied", func(c *Config) {}, "does not cover temporal_address", 0},
		{"Temporal's IPv6 address left open", func(c *Config) { c.DenyAddresses = []string{"10.0.10.0/28"} }, "does not cover temporal_address temporal.internal (fd00:10::5)", 0},
		{"Loki left open", func(c *Config) { c.DenyAddresses = []string{"10.0.10.5", "fd00:10::5"} }, "does not cover loki_url", 0},
		{"IP literals", func(c *Config) {
			c.TemporalAddress, c.LokiURL = "10.0.10.5:7233", "http://[fd00:10::9]:3100"
			c.DenyAddresses = []string{"10.0.10.5", "fd00:10::9"}
		}, "", 0},
		{"IP literal left open", func(c *Config) {
			c.TemporalAddress = "10.0.10.9:7233"
			c.DenyAddresses = []string{"10.0.10.5", "fd00:10::5", "10.0.10.6"}
		}, "does not cover temporal_address 10.0.10.9", 0},
		{"IPv4-mapped name", func(c *Config) {
			c.TemporalAddress = "mapped.internal:7233"
			c.DenyAddresses = []string{"10.0.10.0/28"}
		}, "", 0},
		{"unresolvable Temporal", func(c *Config) {
			c.TemporalAddress = "nowhere.internal:7233"
			c.DenyAddresses = []string{"10.0.10.0/28", "fd00:10::/64"}
		}, "cannot check deny_addresses", 0},
		{"core API denied too", func(c *Config) { c.DenyAddresses = []string{"10.0.0.0/8", "fd00:10::/64"} }, "covers api_url core.internal (10.0.20.7)", 0},
		{"core API on Temporal's address", func(c *Config) {
			c.APIURL = "https://temporal.internal:8080"
			c.DenyAddresses = []string{"10.0.10.0/28", "fd00:10::/64"}
		}, "covers api_url", 0},
		{"DNS resolver denied", func(c *Config) { c.DenyAddresses = []string{"10.0.10.0/28", "fd00:10::/64", "10.0.30.0/24"} }, "covers the DNS resolver 10.0.30.53", 0},
		{"loopback control plane (development)", func(c *Config) {
			c.APIURL, c.TemporalAddress, c.LokiURL = "http://127.0.0.1:8080", "127.0.0.1:7233", "http://[::1]:3100"
		}, "", 2},
		{"no control plane named", func(c *Config) { c.TemporalAddress, c.LokiURL = "", "" }, "", 0},
		{"too many entries", func(c *Config) {
			c.DenyAddresses = []string{"10.0.10.0/28", "fd00:10::/64"}
			for i := 0; i <= units.MaxDenyAddresses; i++ {
				c.DenyAddresses = append(c.DenyAddresses, fmt.Sprintf("10.1.%d.1", i))
			}
		}, "at most", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := prod
			tt.edit(&c)
			warnings, err := c.checkDenyAddresses(context.Background(), lookup, resolvers)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want one saying %q", err, tt.want)
			}
			if len(warnings) != tt.warnings {
				t.Errorf("warnings %q, want %d", warnings, tt.warnings)
			}
		})
	}
}
