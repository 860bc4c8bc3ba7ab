package nodeconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		body := `{"api_url":"http://core","credential":"secret","deny_addresses":` + addrs + `}`
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatalf("deny_addresses %s: Load: %v (must not fail on them)", addrs, err)
		}
		if err := c.CheckDenyAddresses(); (err == nil) != ok {
			t.Errorf("deny_addresses %s: err = %v, want ok %v", addrs, err, ok)
		}
	}
}
