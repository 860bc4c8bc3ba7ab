// Command node-agent runs on every web node: it keeps the node's cron units
// in the state the core API wants.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "node-agent",
		Short:         "hostcron node agent: cron jobs as systemd timers on this node",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(calendarCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "node-agent:", err)
		os.Exit(1)
	}
}
