//go:build e2e

// Package faults injects the faults a hosting shard lives with into three
// real systemd nodes and checks exactly-once and the run history against an
// independent witness: every command appends its node and run key
// ($HOSTCRON_RUN_KEY) to a marker file on the shared directory, so what
// really ran is known without trusting hostcron's own records.
//
// The scenarios drive the node agents through their commands (as tests/e2e
// does) and change jobs through the real store, so a fault on the node side
// is tested without the workflow engine in between.
package faults

import (
	"os"
	"testing"

	"github.com/hostcron/hostcron/tests/harness"
)

var c *harness.Cluster

func TestMain(m *testing.M) {
	os.Exit(harness.RunTests(m, "faults", harness.Options{Nodes: 3}, func(k *harness.Cluster) { c = k }))
}
