//go:build e2e

package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// repoRoot is the module root above the test's directory (tiers live at
// any depth under tests/).
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
	}
}
