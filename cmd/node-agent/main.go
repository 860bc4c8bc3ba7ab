// Command node-agent runs on every web node: it keeps the node's cron units
// in the state the core API wants.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/loglevel"
	"github.com/hostcron/hostcron/internal/nodeconf"
)

func main() {
	level, err := loglevel.Parse(os.Getenv(loglevel.Env))
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(1)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("component", "node-agent")
	slog.SetDefault(log)
	var configPath string
	root := &cobra.Command{
		Use:           "node-agent",
		Short:         "hostcron node agent: cron jobs as systemd timers on this node",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&configPath, "config", nodeconf.DefaultPath, "node configuration file")
	root.AddCommand(calendarCmd())
	root.AddCommand(unitsCmds(&configPath, log)...)
	root.AddCommand(runCmd(&configPath, log))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(1)
	}
}
