//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// TestJobEnvironment: a job's environment reaches its command on a booted
// node, and its values are only in the job's spec file (root's, 0600),
// never in the unit files, which anyone on the node may read.
func TestJobEnvironment(t *testing.T) {
	const node = "node1"
	const secret = "s3cr3t-sentinel"
	cmd := `echo "greeting=$GREETING"; echo "secret_len=${#DB_PASSWORD}"`
	job := c.NewJobWithEnv(t, "acme", "0 3 29 2 *", cmd,
		map[string]string{"GREETING": "hello world", "DB_PASSWORD": secret}, 60, 64, 5)
	if job.Environment["DB_PASSWORD"] != secret {
		t.Fatalf("the desired job lacks its environment: %v", job.Environment)
	}
	c.Agent(t, node, []wire.Job{job}, nil, "apply")
	t.Cleanup(func() { c.Agent(t, node, nil, nil, "remove", job.UnitName()) })

	run := runNowAndWait(t, node, job, 1, 60*time.Second)
	out := journal(t, node, job, func(s string) bool { return strings.Contains(s, "secret_len=") })
	if run.Result != wire.ResultSuccess {
		t.Errorf("result %s (%s), want success; journal:\n%s", run.Result, run.FailureReason, out)
	}
	for _, want := range []string{"greeting=hello world", "secret_len=15"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the journal:\n%s", want, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("the journal shows the secret value:\n%s", out)
	}

	for _, ext := range []string{".service", ".timer"} {
		path := "/etc/systemd/system/" + job.UnitName() + ext
		text, err := c.Exec(node, nil, "cat", path)
		if err != nil {
			t.Fatalf("cat %s: %v %s", path, err, text)
		}
		if strings.Contains(text, secret) || strings.Contains(text, "DB_PASSWORD") {
			t.Errorf("%s holds the job's environment:\n%s", path, text)
		}
	}
	// systemd's own view of the unit (systemctl show reads its Environment=).
	if show, _ := c.Exec(node, nil, "systemctl", "show", job.UnitName()+".service"); strings.Contains(show, secret) {
		t.Errorf("systemctl show exposes the secret value")
	}

	spec := "/var/lib/hostcron/jobs/" + job.UnitName() + ".json"
	st, err := c.Exec(node, nil, "stat", "-c", "%a %U %G", spec)
	if err != nil {
		t.Fatalf("stat %s: %v %s", spec, err, st)
	}
	if got := strings.TrimSpace(st); got != "600 root root" {
		t.Errorf("%s is %q, want 600 root root", spec, got)
	}
	if body, err := c.Exec(node, nil, "cat", spec); err != nil || !strings.Contains(body, secret) {
		t.Errorf("%s does not hold the environment (%v):\n%s", spec, err, body)
	}
	// The tenant's own user cannot read it (only the unit's credential copy).
	if out, err := c.Exec(node, nil, "runuser", "-u", job.User, "--", "cat", spec); err == nil || strings.Contains(out, secret) {
		t.Errorf("user %s read %s: %v %s", job.User, spec, err, out)
	}
}
