package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/wire"
)

// runNowCmd starts one run-now run of a unit on this node, as the daemon's
// RunNow activity does (same admission, same unit manager call): for
// operators, and for the fault tier, which drives nodes without Temporal.
// Re-sending a request id never runs it twice: the runner keys the run by
// it and the run-now stamp on shared storage remembers it.
func runNowCmd(configPath *string, log *slog.Logger) *cobra.Command {
	var request string
	cmd := &cobra.Command{
		Use:   "run-now UNIT --request ID",
		Short: "Start one run of a cron unit (cron-{tenant}-{id}) outside its schedule, keyed by the request id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			unit := args[0]
			if err := trust.AdmitUnit(unit); err != nil {
				return fmt.Errorf("run now: %w", err)
			}
			return useManager(cmd.Context(), *configPath, log, func(m *unitmgr.Manager) error {
				if err := m.RunNow(cmd.Context(), wire.RunNowRequest{Unit: unit, Request: request}); err != nil {
					return err
				}
				log.Info("run-now started", "unit", unit, "request", request)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&request, "request", "", "request id ([A-Za-z0-9_-], at most 64); the run's key is {job}#manual#{request}")
	_ = cmd.MarkFlagRequired("request")
	return cmd
}
