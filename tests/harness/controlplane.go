//go:build e2e

package harness

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The control plane tenants must not reach (Options.DenyControlPlane).
//
// The nodes share the host's network namespace, and everything the
// harness runs listens on 127.0.0.1 by default, which IPAddressDeny=
// cannot deny (units.ParseDenyAddress: it would cut tenants off their
// local databases). With DenyControlPlane, Temporal (every service of the
// embedded server) and Loki listen on an address of their own instead,
// added to the host's loopback device outside 127.0.0.0/8 (198.18.0.0/15,
// the benchmarking range, one address per cluster), and every node's
// deny_addresses names it, so every cron unit carries IPAddressDeny= for
// it. The core API stays on 127.0.0.1: cron-outcome reports to it from
// inside the unit.
//
// IPAddressDeny= needs systemd's BPF firewall, which exists only on a
// unified cgroup hierarchy; the test nodes boot on a hybrid host, where
// systemd ignores it (the agent warns). So the harness also does what
// docs/semantics.md asks of the operator of such a node: it rejects
// traffic from tenant users (uid >= 1000) to that address in the
// (shared) network namespace's OUTPUT chain, with the nodes' iptables.

// tenantUIDs is the uid range the operator's firewall rejects: every
// tenant user (trust.Admit's floor), never root or system users.
const tenantUIDs = "1000-4294967294"

// setupControlPlane picks and adds the cluster's control-plane address.
func (c *Cluster) setupControlPlane() error {
	base := netip.MustParseAddr("198.18.0.0").As4()
	n := uint32(os.Getpid())%(1<<17-2) + 1 // inside 198.18.0.0/15
	ip := netip.AddrFrom4([4]byte{base[0], base[1] + byte(n>>16), byte(n >> 8), byte(n)})
	out, err := exec.Command("ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip addr show: %v\n%s", err, out)
	}
	if strings.Contains(string(out), " "+ip.String()+"/") {
		return fmt.Errorf("control-plane address %s is already in use on this host", ip)
	}
	// Recorded first, so a reaper removes it should this run be killed
	// outright (reap.go).
	if err := os.WriteFile(filepath.Join(c.base, controlPlaneRecord), []byte(ip.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("record control-plane address: %w", err)
	}
	if out, err := exec.Command("ip", "addr", "add", ip.String()+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("add control-plane address %s: %v\n%s", ip, err, out)
	}
	c.controlPlane = ip.String()
	return nil
}

// unfirewallControlPlane removes the operator's rule, while nodes run.
func (c *Cluster) unfirewallControlPlane() {
	if c.firewalled != "" {
		// From any node still running (the one that installed it may be down).
		var out string
		err := fmt.Errorf("no node running")
		for _, n := range append([]string{c.firewalled}, c.Nodes...) {
			if out, err = c.Exec(n, nil, append([]string{"iptables", "-D"}, c.firewallRule()...)...); err == nil {
				break
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "remove the control-plane firewall rule: %v\n%s", err, out)
		}
		c.firewalled = ""
	}
}

// removeControlPlane removes the address, once Temporal and Loki are down.
func (c *Cluster) removeControlPlane() {
	if c.controlPlane == "" {
		return
	}
	if out, err := exec.Command("ip", "addr", "del", c.controlPlane+"/32", "dev", "lo").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "remove control-plane address %s: %v\n%s", c.controlPlane, err, out)
	}
}

// ControlPlaneIP is the address Temporal and Loki listen on ("" without
// Options.DenyControlPlane).
func (c *Cluster) ControlPlaneIP() string { return c.controlPlane }

// TemporalAddress is the Temporal frontend as the nodes dial it.
func (c *Cluster) TemporalAddress() string { return c.temporalAddr }

// listenIP is where Temporal and Loki listen.
func (c *Cluster) listenIP() string {
	if c.controlPlane != "" {
		return c.controlPlane
	}
	return "127.0.0.1"
}

// denyAddresses is every node's deny_addresses.
func (c *Cluster) denyAddresses() []string {
	if c.controlPlane == "" {
		return nil
	}
	return []string{c.controlPlane}
}

// certEnv makes scripts/certs.sh put the control-plane address into the
// Temporal frontend's certificate, which the core and nodes verify.
func (c *Cluster) certEnv() []string {
	if c.controlPlane == "" {
		return nil
	}
	return []string{"TEMPORAL_EXTRA_SAN=IP:" + c.controlPlane}
}

// firewallRule is the operator's rule (iptables syntax, after -I/-D).
func (c *Cluster) firewallRule() []string {
	return []string{"OUTPUT", "-d", c.controlPlane + "/32", "-m", "owner", "--uid-owner", tenantUIDs,
		"-m", "comment", "--comment", "hostcron-e2e-" + c.controlPlane, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"}
}

// firewallControlPlane installs the operator's rule once, from node n (its
// iptables; the namespace is the host's and every node's).
func (c *Cluster) firewallControlPlane(n string) error {
	if c.controlPlane == "" || c.firewalled != "" {
		return nil
	}
	if out, err := c.Exec(n, nil, append([]string{"iptables", "-I"}, c.firewallRule()...)...); err != nil {
		return fmt.Errorf("firewall the control plane from %s: %v\n%s", n, err, out)
	}
	c.firewalled = n
	return nil
}
