//go:build e2e

// Package e2e tests the node side on three real systemd nodes: units over
// D-Bus, the election, cron-outcome and journald, driven through the node
// agent's commands (no workflow engine). Run with `make test-e2e`.
package e2e

import (
	"os"
	"testing"

	"github.com/hostcron/hostcron/tests/harness"
)

var c *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunTests(m, "e2e", harness.Options{Nodes: 3}, func(k *harness.Cluster) { c = k }))
}
