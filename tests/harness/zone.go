//go:build e2e

package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// CompileZone compiles zic source text (one Zone and its rules) with the
// host's zic into a temporary directory and returns the TZif bytes of
// zone. Nothing is installed on the host.
func CompileZone(t testing.TB, zone, source string) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "zone.zi")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatalf("write zic source: %v", err)
	}
	if out, err := exec.Command("zic", "-d", filepath.Join(dir, "out"), src).CombinedOutput(); err != nil {
		t.Fatalf("zic %s: %v\n%s", zone, err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out", zone))
	if err != nil {
		t.Fatalf("compiled zone %s: %v", zone, err)
	}
	return b
}

// InstallZone puts a compiled zone (TZif) into /usr/share/zoneinfo on every
// node, where systemd (OnCalendar=… Zone) and the node's Go binaries
// (time.LoadLocation) find it; the host's zone database is left alone. The
// test's cleanup removes it again, after the cleanups registered later
// (which should remove the units that name it).
func (c *Cluster) InstallZone(t testing.TB, zone string, tzif []byte) {
	t.Helper()
	for _, n := range c.Nodes {
		p := filepath.Join(c.Root(n), "usr/share/zoneinfo", zone)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatalf("zone dir on %s: %v", n, err)
		}
		t.Cleanup(func() {
			if err := os.Remove(p); err != nil {
				t.Logf("remove zone %s from %s: %v", zone, n, err)
			}
			_ = os.Remove(filepath.Dir(p)) // the zone's own area dir, if now empty
		})
		if err := os.WriteFile(p, tzif, 0o644); err != nil {
			t.Fatalf("install zone %s on %s: %v", zone, n, err)
		}
	}
}

// NewJobInZone is NewJob with a time zone: the job is stored straight
// through the store (the API would check the zone against the host's zone
// database, which need not have it) and returned as the nodes must have it.
func (c *Cluster) NewJobInZone(t testing.TB, tenant, schedule, zone, command string, timeout, memMB, maxFailures int) wire.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, _, err := c.Store.CreateJob(ctx, c.Tenants[tenant].ID, store.JobFields{
		WebrootID: c.Webroots[tenant].ID, Schedule: schedule, Timezone: zone, Command: command,
		Enabled: true, TimeoutSeconds: timeout, MaxMemoryMB: memMB, MaxFailures: maxFailures,
	}, nil)
	if err != nil {
		t.Fatal(fmt.Errorf("create job in %s: %w", zone, err))
	}
	d, _, err := c.Store.DesiredJob(ctx, j.ID)
	if err != nil {
		t.Fatal(fmt.Errorf("desired job %s: %w", j.ID, err))
	}
	return d
}
