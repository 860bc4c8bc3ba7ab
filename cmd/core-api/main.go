// Command core-api serves the hostcron API: tenants' cron jobs in
// PostgreSQL, outcomes from the nodes, run history.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/dispatch"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/workflows"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	root := &cobra.Command{
		Use:           "core-api",
		Short:         "hostcron core API",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var dsn string
	root.PersistentFlags().StringVar(&dsn, "database-url", os.Getenv("HOSTCRON_DATABASE_URL"),
		"PostgreSQL DSN (env HOSTCRON_DATABASE_URL)")
	root.AddCommand(serveCmd(&dsn, log), migrateCmd(&dsn))
	if err := root.Execute(); err != nil {
		log.Error("core-api failed", "err", err)
		os.Exit(1)
	}
}

func migrateCmd(dsn *string) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Bring the database schema up to date",
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := store.Open(cmd.Context(), *dsn, 2)
			if err != nil {
				return err
			}
			defer st.Close()
			return st.Migrate(cmd.Context())
		},
	}
}

func serveCmd(dsn *string, log *slog.Logger) *cobra.Command {
	var listen, adminKey, temporalAddr, temporalNS, lokiURL, lokiOrg string
	var nodeTimeout, convergeEvery time.Duration
	var hk housekeeping.Config
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API (migrates the schema first)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			st, err := store.Open(ctx, *dsn, 32)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := st.Migrate(ctx); err != nil {
				return err
			}
			cfg := api.Config{AdminKey: adminKey, Logger: log}
			if lokiURL != "" {
				cfg.Logs = &logship.Client{URL: lokiURL, OrgID: lokiOrg}
			}
			if temporalAddr != "" {
				tc, err := workflows.Dial(ctx, temporalAddr, temporalNS, log)
				if err != nil {
					return err
				}
				defer tc.Close()
				w, err := workflows.StartCoreWorker(tc, st)
				if err != nil {
					return err
				}
				defer w.Stop()
				if err := workflows.EnsureConvergeSchedule(ctx, tc, convergeEvery); err != nil {
					log.Warn("no periodic converge", "err", err)
				}
				d := &dispatch.Dispatcher{Store: st, Temporal: tc, Log: log, NodeTimeout: nodeTimeout}
				go d.Run(ctx)
				cfg.Converger = workflows.Converger{Client: tc, NodeTimeout: nodeTimeout}
			}
			e, _ := api.New(st, cfg)
			srv := &http.Server{Addr: listen, Handler: e, ReadHeaderTimeout: 10 * time.Second}
			go housekeeping.Run(ctx, st, hk, log)
			errc := make(chan error, 1)
			go func() { errc <- srv.ListenAndServe() }()
			log.Info("core-api listening", "addr", listen)
			select {
			case err := <-errc:
				return fmt.Errorf("serve: %w", err)
			case <-ctx.Done():
			}
			log.Info("shutting down")
			shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("shutdown: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", envOr("HOSTCRON_LISTEN", "127.0.0.1:8080"), "address to listen on (env HOSTCRON_LISTEN)")
	cmd.Flags().StringVar(&adminKey, "admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "bootstrap admin API key (env HOSTCRON_ADMIN_KEY)")
	cmd.Flags().StringVar(&temporalAddr, "temporal", os.Getenv("HOSTCRON_TEMPORAL_ADDRESS"),
		"Temporal frontend host:port (env HOSTCRON_TEMPORAL_ADDRESS); empty: changes stay queued in the outbox")
	cmd.Flags().StringVar(&temporalNS, "temporal-namespace", envOr("HOSTCRON_TEMPORAL_NAMESPACE", "default"), "Temporal namespace")
	cmd.Flags().StringVar(&lokiURL, "loki", os.Getenv("HOSTCRON_LOKI_URL"), "Loki base URL for the tenant logs API (env HOSTCRON_LOKI_URL)")
	cmd.Flags().StringVar(&lokiOrg, "loki-org-id", os.Getenv("HOSTCRON_LOKI_ORG_ID"), "X-Scope-OrgID for a multi-tenant Loki")
	cmd.Flags().DurationVar(&nodeTimeout, "node-timeout", 2*time.Minute, "how long provisioning waits for one node, retries included")
	cmd.Flags().DurationVar(&convergeEvery, "converge-every", 10*time.Minute, "how often every node is converged to repair drift")
	cmd.Flags().DurationVar(&hk.Grace, "outcome-grace", 2*time.Minute, "how long after a run's timeout its outcome may still arrive")
	cmd.Flags().DurationVar(&hk.Interval, "sweep-interval", 30*time.Second, "how often to record lost runs and prune history")
	cmd.Flags().DurationVar(&hk.Retention, "run-retention", 180*24*time.Hour, "how long run history is kept")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
