//go:build e2e

// Package e2e tests the node side on three real systemd nodes: units over
// D-Bus, the election, cron-outcome and journald, driven through the node
// agent's commands (no workflow engine). Run with `make test-e2e`.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/hostcron/hostcron/tests/harness"
)

var c *harness.Cluster

func TestMain(m *testing.M) {
	var err error
	if c, err = harness.Start(harness.Options{Nodes: 3}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	code := m.Run()
	c.Stop()
	os.Exit(code)
}
