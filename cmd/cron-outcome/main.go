// Command cron-outcome runs as ExecStopPost=+ of every cron service: it
// classifies how the run ended and reports it to the core API, or spools
// the report for the node agent to deliver. It never fails the unit and
// never takes more than a few seconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/units"
)

// deadline bounds the whole hook; the unit's TimeoutStopSec is the backstop.
const deadline = 5 * time.Second

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "cron-outcome")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := run(ctx, log); err != nil {
		log.Error("outcome not reported", "err", err)
	}
	os.Exit(0) // never turn a reporting problem into a unit failure
}

func run(ctx context.Context, log *slog.Logger) error {
	cfg, err := nodeconf.Load(envOr("HOSTCRON_NODE_CONFIG", nodeconf.DefaultPath))
	if err != nil {
		return err
	}
	jobID, tenant := os.Getenv("HOSTCRON_CRON_JOB_ID"), os.Getenv("HOSTCRON_TENANT")
	if !units.ValidID(jobID) || !units.ValidTenant(tenant) {
		return errors.New("HOSTCRON_CRON_JOB_ID/HOSTCRON_TENANT missing: not run from a hostcron unit")
	}
	// Only the runner's local record names the run: it writes it before
	// it touches shared storage. Recomputing a slot from the clock here
	// would report a hung run under another slot's key. Without a record
	// (or a key) the runner never named a run; the core's sweeper records
	// a slot nobody reported as lost.
	rec, err := runner.ReadRecord(os.Getenv("RUNTIME_DIRECTORY"))
	if err != nil {
		return fmt.Errorf("no run record, nothing to report: %w", err)
	}
	report, silent := outcome.Classify(outcome.ServiceFromEnv(), rec, true, time.Now())
	if silent {
		return nil
	}
	if rec.RunKey == "" {
		return fmt.Errorf("run record names no run (%s: %s), nothing to report", rec.Kind, rec.Reason)
	}
	client := outcome.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential, HTTP: &http.Client{Timeout: deadline / 2}}
	err = client.Post(ctx, jobID, report)
	switch {
	case err == nil:
		log.Info("outcome reported", "run_key", report.RunKey, "result", report.Result)
		return nil
	case errors.Is(err, outcome.ErrPermanent):
		return err
	}
	log.Warn("core API unreachable, spooling outcome", "run_key", report.RunKey, "err", err)
	return outcome.Spool(cfg.SpoolDir, jobID, report)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
