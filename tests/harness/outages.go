//go:build e2e

package harness

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
)

// This file holds the outages a tier may inject into its own cluster: its
// PostgreSQL stopped (Options.PrivatePostgres), its Temporal stopped and
// restarted with its state (Options.RestartableTemporal), and one node cut
// off from the core API by the host's firewall.

// createDB makes the cluster's database: in the shared test cluster of
// scripts/with-pg.sh, or in a cluster of this tier's own that it may stop.
func (c *Cluster) createDB(ctx context.Context) (*pgtest.DB, error) {
	if !c.opts.PrivatePostgres {
		return pgtest.Create(ctx, "hc_e2e", 10)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.pgDir, c.pgPort = c.base+"-pg", port
	if err := c.StartPostgres(); err != nil {
		return nil, err
	}
	admin := url.URL{Scheme: "postgres", User: url.User("hostcron"), Host: fmt.Sprintf("127.0.0.1:%d", port),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return pgtest.CreateAt(ctx, admin.String(), "hc_e2e", 10)
}

// StopPostgres stops the tier's own PostgreSQL (fast shutdown: sessions
// are cut, as in a crash of the database host).
func (c *Cluster) StopPostgres() error {
	if c.pgDir == "" {
		return fmt.Errorf("stop postgres: the cluster has no PostgreSQL of its own (Options.PrivatePostgres)")
	}
	if out, err := c.run(nil, filepath.Join(c.Repo, "scripts/pg.sh"), "stop", c.pgDir); err != nil {
		return fmt.Errorf("pg.sh stop: %w\n%s", err, out)
	}
	return nil
}

// StartPostgres starts the tier's own PostgreSQL on its port, with its data.
func (c *Cluster) StartPostgres() error {
	if c.pgDir == "" {
		return fmt.Errorf("start postgres: the cluster has no PostgreSQL of its own (Options.PrivatePostgres)")
	}
	if out, err := c.run(nil, filepath.Join(c.Repo, "scripts/pg.sh"), "start", c.pgDir, fmt.Sprint(c.pgPort)); err != nil {
		return fmt.Errorf("pg.sh start: %w\n%s", err, out)
	}
	return nil
}

// stopPrivatePostgres stops and removes the tier's own PostgreSQL.
func (c *Cluster) stopPrivatePostgres() {
	if c.pgDir == "" {
		return
	}
	if err := c.StopPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.RemoveAll(c.pgDir)
}

// launchTemporal runs temporal-dev on c.tport and waits until it serves.
// With Options.RestartableTemporal its state lives in a SQLite file, so a
// restart keeps namespaces, workflows and schedules.
func (c *Cluster) launchTemporal() error {
	args := []string{"--ip", c.listenIP(), "--port", fmt.Sprint(c.tport), "--namespace", "default",
		"--tls-cert", c.trustDir + "/temporal.crt", "--tls-key", c.trustDir + "/temporal.key", "--tls-ca", c.trustDir + "/ca.crt"}
	if c.opts.RestartableTemporal {
		dir := c.base + "-temporal"
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("temporal state dir: %w", err)
		}
		args = append(args, "--db-file", filepath.Join(dir, "temporal.db"))
	}
	cmd := exec.Command(filepath.Join(c.bin, "temporal-dev"), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return fmt.Errorf("temporal-dev: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start temporal-dev: %w", err)
	}
	c.temporal = cmd
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "temporal ready") {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			return fmt.Errorf("temporal-dev exited before it was ready")
		}
	case <-time.After(60 * time.Second):
		return fmt.Errorf("temporal-dev not ready after 60s")
	}
	return nil
}

// StopTemporal stops the embedded Temporal server (SIGINT, as a deploy
// would); the core, the nodes and the tests' client stay up and redial.
func (c *Cluster) StopTemporal() error {
	if !c.opts.RestartableTemporal {
		return fmt.Errorf("stop temporal: its state would be lost (Options.RestartableTemporal)")
	}
	if c.temporal == nil {
		return nil
	}
	_ = c.temporal.Process.Signal(os.Interrupt)
	_ = c.temporal.Wait()
	c.temporal = nil
	return nil
}

// StartTemporal starts a stopped Temporal again on the same port with the
// same state.
func (c *Cluster) StartTemporal() error {
	if c.temporal != nil {
		return nil
	}
	// The port was ours a moment ago; wait while the old listener drains.
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.tport))
		if err == nil {
			l.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporal port %d still taken: %w", c.tport, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return c.launchTemporal()
}

// PartitionFromAPI drops every packet a node sends to the core API (its
// agent's announcements, its outcome hooks' reports, its spool's
// redeliveries) with an iptables rule on the host that matches the node's
// cgroup; the API itself stays up for everyone else, and the node keeps
// reaching Temporal and the shared storage. heal removes the rule; call it
// (it is idempotent) also on failure.
func (c *Cluster) PartitionFromAPI(n string) (heal func() error, err error) {
	pid, err := c.leader(n)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%s/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("cgroup of %s: %w", n, err)
	}
	cg := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::/"); ok {
			if i := strings.Index(p+"/", "/"+n+"/"); i >= 0 {
				cg = p[:i+len(n)+1]
			}
		}
	}
	if cg == "" {
		return nil, fmt.Errorf("no cgroup v2 path naming %s in\n%s", n, b)
	}
	_, port, err := net.SplitHostPort(c.apiAddr)
	if err != nil {
		return nil, fmt.Errorf("API address %q: %w", c.apiAddr, err)
	}
	rule := []string{"OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", port, "-m", "cgroup", "--path", cg, "-j", "DROP"}
	if err := c.iptables(append([]string{"-I"}, rule...)...); err != nil {
		return nil, err
	}
	healed := false
	return func() error {
		if healed {
			return nil
		}
		if err := c.iptables(append([]string{"-D"}, rule...)...); err != nil {
			return err
		}
		healed = true
		return nil
	}, nil
}

// iptables changes the host's firewall with the iptables of a running node
// (the nodes share the host's network namespace; only the node's mount
// namespace is entered, for the binary), so the host needs none.
func (c *Cluster) iptables(args ...string) error {
	var last error
	for _, n := range c.Nodes {
		pid, err := c.leader(n)
		if err != nil {
			last = err
			continue
		}
		run := func(args ...string) ([]byte, error) {
			return exec.Command("nsenter", append([]string{"-t", pid, "-m", "--", "iptables-legacy", "-w"}, args...)...).CombinedOutput()
		}
		if len(args) > 0 && args[0] == "-I" {
			if err := purgeStaleCgroupRules(run); err != nil {
				return err
			}
		}
		if out, err := run(args...); err != nil {
			return fmt.Errorf("iptables %v: %w\n%s", args, err, out)
		}
		return nil
	}
	return fmt.Errorf("iptables %v: no running node: %v", args, last)
}

// purgeStaleCgroupRules deletes OUTPUT rules that match a node cgroup
// which no longer exists: the partition rule of a test run killed before
// it healed. iptables-legacy hands the kernel the whole table on every
// change, and the kernel checks every rule again, so one rule naming a
// vanished cgroup makes every later change fail ("Invalid argument";
// dmesg: "xt_cgroup: invalid path, errno=-2"). Deleting such a rule
// works: the table handed over then has only valid rules.
func purgeStaleCgroupRules(run func(args ...string) ([]byte, error)) error {
	out, err := run("-S", "OUTPUT")
	if err != nil {
		return fmt.Errorf("iptables -S OUTPUT: %w\n%s", err, out)
	}
	for _, rule := range staleCgroupRules(string(out), cgroupExists) {
		if out, err := run(append([]string{"-D"}, rule...)...); err != nil {
			return fmt.Errorf("delete stale rule %v: %w\n%s", rule, err, out)
		}
	}
	return nil
}

// staleCgroupRules picks, from `iptables -S OUTPUT`, the rules (as -D
// arguments) whose --path names a hostcron-nodes cgroup that exists not.
func staleCgroupRules(listing string, exists func(path string) bool) [][]string {
	var stale [][]string
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		for i, w := range f {
			f[i] = strings.Trim(w, `"`)
		}
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "--path" && strings.HasPrefix(f[i+1], "hostcron-nodes/") && !exists(f[i+1]) {
				stale = append(stale, f[1:])
				break
			}
		}
	}
	return stale
}

// cgroupExists looks for a cgroup v2 path under the unified mount of a
// hybrid host or the root of a unified one.
func cgroupExists(path string) bool {
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(root, path, "cgroup.procs")); err == nil {
			return true
		}
	}
	return false
}

// leader is the host PID of a node's systemd.
func (c *Cluster) leader(n string) (string, error) {
	out, err := c.NodesSh("pid", n)
	pid := strings.TrimSpace(out)
	if err != nil || pid == "" {
		return "", fmt.Errorf("%s is not running: %v %s", n, err, out)
	}
	return pid, nil
}
