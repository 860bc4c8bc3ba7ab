package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
)

// runCmd is the agent's daemon: it redelivers spooled outcomes until
// SIGTERM.
func runCmd(configPath *string, log *slog.Logger) *cobra.Command {
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := nodeconf.Load(*configPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			log.Info("node agent started", "node", cfg.NodeName)
			redeliverLoop(ctx, cfg, every, log)
			log.Info("node agent stopped")
			return nil
		},
	}
	cmd.Flags().DurationVar(&every, "redeliver-every", 5*time.Second, "how often to retry spooled outcomes")
	return cmd
}

// redeliverLoop drains the outcome spool until ctx ends.
func redeliverLoop(ctx context.Context, cfg nodeconf.Config, every time.Duration, log *slog.Logger) {
	client := outcome.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential, HTTP: &http.Client{Timeout: 10 * time.Second}}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := outcome.Redeliver(ctx, client, cfg.SpoolDir)
		if n > 0 {
			log.Info("redelivered spooled outcomes", "count", n)
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("outcomes stay spooled", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
