//go:build e2e

package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// TestAgentKilledDuringApply (issue 11, scenario e): the agent is killed
// with SIGKILL in the middle of applying 200 jobs, after some unit files
// are written and before the daemon-reload. The next apply repairs the
// node: every timer enabled and active, no unit left needing a reload.
func TestAgentKilledDuringApply(t *testing.T) {
	t.Parallel()
	node := c.Nodes[len(c.Nodes)-1]
	var jobs []wire.Job
	for i := 0; i < 200; i++ {
		// Never due during the test: only the units matter here.
		jobs = append(jobs, c.NewJob(t, "globex", "0 0 1 1 *", "true", 60, 64, 0))
	}
	// The batch goes in a file of its own, so pkill matches this apply and
	// no other test's.
	batch, _ := json.Marshal(jobs)
	const file = "/var/tmp/crash-batch.json"
	if err := os.WriteFile(filepath.Join(c.Root(node), file), batch, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		out, _ := c.Exec(node, nil, "/usr/local/bin/node-agent", "apply", "--file", file)
		done <- out
	}()
	// Kill as soon as the first unit file of the batch is on disk.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := c.Exec(node, nil, "sh", "-c", "ls /etc/systemd/system | grep -c '^cron-globex-' || true")
		if strings.TrimSpace(out) != "0" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := c.Exec(node, nil, "pkill", "-KILL", "-f", "crash-batch.json"); err != nil {
		t.Logf("pkill: %v %s (the apply may have finished first)", err, out)
	}
	if out := <-done; strings.Contains(out, `"written"`) {
		t.Fatalf("the apply finished before it was killed; nothing was tested:\n%s", out)
	}

	c.Agent(t, node, jobs, nil, "apply")
	st := c.State(t, node)
	for _, j := range jobs {
		s, ok := st[j.UnitName()]
		switch {
		case !ok:
			t.Errorf("%s missing after repair", j.UnitName())
		case !s.TimerEnabled || !s.TimerActive:
			t.Errorf("%s: enabled %v active %v after repair", j.UnitName(), s.TimerEnabled, s.TimerActive)
		}
	}
	out, err := c.Exec(node, nil, "sh", "-c",
		"systemctl list-units --all --plain --no-legend 'cron-globex-*' | awk '{print $1}' | "+
			"xargs -r systemctl show -p Id -p NeedDaemonReload | grep -B1 NeedDaemonReload=yes || true")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("units still need a daemon-reload after repair:\n%s", out)
	}
	names := make([]string, len(jobs))
	for i, j := range jobs {
		names[i] = j.UnitName()
	}
	c.Agent(t, node, nil, nil, append([]string{"remove"}, names...)...)
}
