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
