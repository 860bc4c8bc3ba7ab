// Command core-api serves the hostcron API: tenants' cron jobs in
// PostgreSQL, outcomes from the nodes, run history.
package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/core"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/loglevel"
	"github.com/hostcron/hostcron/internal/quota"
	"github.com/hostcron/hostcron/internal/store"
)

func main() {
	level, err := loglevel.Parse(os.Getenv(loglevel.Env))
	if err != nil {
		fmt.Fprintln(os.Stderr, "core-api:", err)
		os.Exit(1)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
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
	cfg := core.Config{Log: log}
	var hk housekeeping.Config
	quotas := store.DefaultQuotas
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API (migrates the schema first)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if err := api.ValidateAdminKey(cfg.AdminKey); err != nil {
				return err
			}
			if quotas.MaxJobs > quota.MaxJobsCeiling {
				return fmt.Errorf("--quota-max-jobs %d: at most %d", quotas.MaxJobs, quota.MaxJobsCeiling)
			}
			if quotas.RunNowPerMinute < 0 || quotas.RunNowPerMinute > quota.MaxValue {
				return fmt.Errorf("--quota-run-now-per-minute %d: 0 (no limit) to %d", quotas.RunNowPerMinute, quota.MaxValue)
			}
			cfg.DatabaseURL, cfg.Housekeeping, cfg.Quotas = *dsn, &hk, &quotas
			cfg.Notify.SMTP.Password = os.Getenv("HOSTCRON_SMTP_PASSWORD") // never a flag: flags show in ps
			return core.Run(ctx, cfg, 15*time.Second)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", envOr("HOSTCRON_LISTEN", "127.0.0.1:8080"), "address to listen on (env HOSTCRON_LISTEN)")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", envOr("HOSTCRON_METRICS_ADDR", "127.0.0.1:9181"),
		"address of the /metrics listener, apart from the API (env HOSTCRON_METRICS_ADDR; empty: no metrics)")
	f.StringVar(&cfg.AdminKey, "admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "bootstrap admin API key (env HOSTCRON_ADMIN_KEY)")
	f.StringVar(&cfg.TemporalAddress, "temporal", os.Getenv("HOSTCRON_TEMPORAL_ADDRESS"),
		"Temporal frontend host:port (env HOSTCRON_TEMPORAL_ADDRESS); empty: changes stay queued in the outbox")
	f.StringVar(&cfg.TemporalNamespace, "temporal-namespace", envOr("HOSTCRON_TEMPORAL_NAMESPACE", "default"), "Temporal namespace")
	f.StringVar(&cfg.Trust.TLSCert, "temporal-tls-cert", os.Getenv("HOSTCRON_TEMPORAL_TLS_CERT"), "client certificate for Temporal's frontend (mTLS)")
	f.StringVar(&cfg.Trust.TLSKey, "temporal-tls-key", os.Getenv("HOSTCRON_TEMPORAL_TLS_KEY"), "key of --temporal-tls-cert")
	f.StringVar(&cfg.Trust.TLSCA, "temporal-tls-ca", os.Getenv("HOSTCRON_TEMPORAL_TLS_CA"), "CA of Temporal's frontend certificate")
	f.StringSliceVar(&cfg.Trust.PayloadKeys, "payload-key", nil, "AES-256 payload key file (repeatable; the first seals, all open)")
	f.StringVar(&cfg.Trust.SigningKey, "signing-key", os.Getenv("HOSTCRON_SIGNING_KEY"), "the core's Ed25519 signing key (nodes trust its public half)")
	f.StringSliceVar(&cfg.Trust.TrustedKeys, "node-public-keys", nil, "nodes' Ed25519 public key files or globs (repeatable)")
	f.StringVar(&cfg.LokiURL, "loki", os.Getenv("HOSTCRON_LOKI_URL"), "Loki base URL for the tenant logs API (env HOSTCRON_LOKI_URL)")
	f.StringVar(&cfg.LokiOrgID, "loki-org-id", os.Getenv("HOSTCRON_LOKI_ORG_ID"), "X-Scope-OrgID for a multi-tenant Loki")
	f.DurationVar(&cfg.NodeTimeout, "node-timeout", 2*time.Minute, "how long provisioning waits for one node, retries included")
	f.DurationVar(&cfg.ConvergeEvery, "converge-every", 10*time.Minute, "how often every node is converged to repair drift (0: no schedule)")
	f.BoolVar(&cfg.UnbatchedOutcomes, "unbatched-outcomes", false,
		"record each outcome in a transaction of its own instead of group commits (benchmark baseline)")
	f.DurationVar(&hk.Grace, "outcome-grace", 2*time.Minute, "how long after a run's timeout its outcome may still arrive")
	f.DurationVar(&hk.Interval, "sweep-interval", 30*time.Second, "how often to record lost runs and prune history")
	f.DurationVar(&hk.Retention, "run-retention", 180*24*time.Hour, "how long run history is kept")
	f.BoolVar(&cfg.Notify.AllowPrivateTargets, "notify-allow-private-targets", false,
		"let webhooks use http and reach loopback, link-local and private addresses (tests, private installs only)")
	f.StringVar(&cfg.Notify.SMTP.Addr, "smtp-addr", os.Getenv("HOSTCRON_SMTP_ADDR"), "SMTP relay host:port for e-mail notifications (empty: no e-mail)")
	f.StringVar(&cfg.Notify.SMTP.From, "smtp-from", os.Getenv("HOSTCRON_SMTP_FROM"), "From address of notification e-mail")
	f.StringVar(&cfg.Notify.SMTP.Username, "smtp-username", os.Getenv("HOSTCRON_SMTP_USERNAME"), "SMTP AUTH user (password: env HOSTCRON_SMTP_PASSWORD)")
	f.BoolVar(&cfg.Notify.SMTP.StartTLS, "smtp-starttls", true, "require STARTTLS with the relay")
	f.IntVar(&cfg.Notify.MailLimit, "mail-limit", 20, "notification e-mails per tenant per hour; beyond it a digest")
	// Every tenant's limits unless an admin sets its own (0: no limit).
	f.IntVar(&quotas.MaxJobs, "quota-max-jobs", quotas.MaxJobs, "default most cron jobs per tenant (at most, and 0 means, the ceiling of 1000)")
	f.IntVar(&quotas.MinIntervalSeconds, "quota-min-interval", 0, "default shortest time between a job's fire times, seconds")
	f.IntVar(&quotas.MaxTimeoutSeconds, "quota-max-timeout", 0, "default largest timeout_seconds")
	f.IntVar(&quotas.MaxMemoryMB, "quota-max-memory-mb", 0, "default largest max_memory_mb")
	f.IntVar(&quotas.RunNowPerMinute, "quota-run-now-per-minute", quotas.RunNowPerMinute,
		"default run-now and backfill requests per tenant: this many at once, then this many a minute (0: no limit)")
	return cmd
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
