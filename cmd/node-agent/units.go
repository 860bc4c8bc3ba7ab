package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// openManager connects to systemd over D-Bus (its private socket when root,
// else the system bus) and returns a unit manager with the node's paths.
func openManager(ctx context.Context, cfg nodeconf.Config, log *slog.Logger) (*unitmgr.Manager, func(), error) {
	if _, err := cfg.CheckDenyAddresses(ctx); err != nil {
		return nil, nil, err
	}
	conn, err := unitmgr.DialDBus(ctx)
	if err != nil {
		return nil, nil, err
	}
	paths := units.DefaultPaths
	paths.SpecDir = cfg.SpecDir
	m := unitmgr.New(conn, cfg.UnitDir, paths, log)
	m.SetNode(desired.Node{DenyAddresses: cfg.DenyAddresses})
	return m, conn.Close, nil
}

// warnControlPlane logs what tenants can reach of the control plane; the
// agent's run does, once (the one-shot commands keep their output clean).
func warnControlPlane(ctx context.Context, cfg nodeconf.Config, log *slog.Logger) {
	warnings, _ := cfg.CheckDenyAddresses(ctx) // an error stops openManager
	for _, w := range warnings {
		log.Warn("control plane reachable by tenants: " + w)
	}
	if len(cfg.DenyAddresses) > 0 && !bpfFirewall() {
		log.Warn("IPAddressDeny= is not enforced on this node (systemd's cgroup hierarchy is not unified, so it has no BPF firewall): deny_addresses must be firewalled for tenant users (docs/semantics.md, Trust boundaries on a node)")
	}
}

// bpfFirewall reports whether systemd can enforce IPAddressDeny=: it
// attaches BPF programs to the unit's cgroup only on the unified (v2)
// hierarchy; on a hybrid or legacy host it ignores the setting.
func bpfFirewall() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// loadConfig reads the node config; commands that only touch systemd can
// run without a core API credential, so a missing file yields defaults.
func loadConfig(path string) (nodeconf.Config, error) {
	cfg, err := nodeconf.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nodeconf.Defaults(), nil
	}
	return cfg, err
}

func readJobs(path string) ([]wire.Job, error) {
	f := os.Stdin
	if path != "-" {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, fmt.Errorf("read desired jobs: %w", err)
		}
		defer f.Close()
	}
	var jobs []wire.Job
	if err := json.NewDecoder(f).Decode(&jobs); err != nil {
		return nil, fmt.Errorf("decode desired jobs: %w", err)
	}
	return jobs, nil
}

// useManager runs fn on a unit manager opened from the node config, and
// closes it afterwards: the one way the one-shot commands reach systemd.
func useManager(ctx context.Context, configPath string, log *slog.Logger, fn func(*unitmgr.Manager) error) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	m, closeFn, err := openManager(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeFn()
	return fn(m)
}

// unitsCmds are one-shot commands on the node's cron units, for operators
// and tests; the daemon does the same through its Temporal activities.
func unitsCmds(configPath *string, log *slog.Logger) []*cobra.Command {
	withManager := func(fn func(ctx context.Context, m *unitmgr.Manager, args []string) (any, error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			return useManager(cmd.Context(), *configPath, log, func(m *unitmgr.Manager) error {
				out, err := fn(cmd.Context(), m, args)
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			})
		}
	}
	var file string
	reconcile := &cobra.Command{
		Use:   "reconcile --file JOBS.json",
		Short: "Make this node's cron units exactly the given jobs (removes every other cron unit, leaves no tombstones)",
		Args:  cobra.NoArgs,
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, _ []string) (any, error) {
			jobs, err := readJobs(file)
			if err != nil {
				return nil, err
			}
			return m.ReconcileExactly(ctx, jobs)
		}),
	}
	apply := &cobra.Command{
		Use:   "apply --file JOBS.json",
		Short: "Add or update the given jobs, leaving others alone",
		Args:  cobra.NoArgs,
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, _ []string) (any, error) {
			jobs, err := readJobs(file)
			if err != nil {
				return nil, err
			}
			return m.Apply(ctx, jobs)
		}),
	}
	for _, c := range []*cobra.Command{reconcile, apply} {
		c.Flags().StringVar(&file, "file", "-", "JSON array of desired jobs (- for stdin)")
	}
	remove := &cobra.Command{
		Use:   "remove UNIT...",
		Short: "Stop and remove cron units (cron-{tenant}-{id}); no tombstone, a live job comes back at the next converge",
		Args:  cobra.MinimumNArgs(1),
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, args []string) (any, error) {
			return m.Remove(ctx, args)
		}),
	}
	state := &cobra.Command{
		Use:   "state",
		Short: "List this node's cron units with hash, timer state and last result",
		Args:  cobra.NoArgs,
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, _ []string) (any, error) {
			showClockOffset(*configPath, os.Stderr)
			spoolState(*configPath)
			return m.State(ctx)
		}),
	}
	runNow := &cobra.Command{
		Use:   "run-now UNIT REQUEST",
		Short: "Start one run-now run of a unit (cron-{tenant}-{id}) and wait until a runner took it, as the RunNow activity does",
		Args:  cobra.ExactArgs(2),
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, args []string) (any, error) {
			if err := trust.AdmitUnit(args[0]); err != nil {
				return nil, fmt.Errorf("run now: %w", err)
			}
			req := wire.RunNowRequest{Unit: args[0], Request: args[1]}
			return req, m.RunNow(ctx, req)
		}),
	}
	cancel := &cobra.Command{
		Use:   "cancel UNIT RUN_KEY",
		Short: "Stop a unit's run if this node runs it now, as the CancelRun activity does; prints whether it did",
		Args:  cobra.ExactArgs(2),
		RunE: withManager(func(ctx context.Context, m *unitmgr.Manager, args []string) (any, error) {
			if err := trust.AdmitUnit(args[0]); err != nil {
				return nil, fmt.Errorf("cancel: %w", err)
			}
			stopped, err := m.CancelRun(ctx, wire.CancelRequest{Unit: args[0], RunKey: args[1]})
			return map[string]bool{"stopped": stopped}, err
		}),
	}
	return []*cobra.Command{reconcile, planCmd(configPath, log), apply, burstCmd(configPath, log), remove, state, runNow, cancel}
}
