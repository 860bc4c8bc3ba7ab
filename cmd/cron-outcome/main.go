// Command cron-outcome runs as ExecStopPost=+ of every cron service: it
// classifies how the run ended and reports it to the core API, or spools
// the report for the node agent to deliver. It never fails the unit and
// never takes more than a few seconds.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/schedule"
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
	rec, recErr := runner.ReadRecord(os.Getenv("RUNTIME_DIRECTORY"))
	haveRecord := recErr == nil
	if !haveRecord {
		// The runner never got far enough to write one: name the slot from
		// the spec, as the runner would have.
		if rec, err = slotFromSpec(filepath.Join(cfg.SpecDir, units.Name(tenant, jobID)+".json")); err != nil {
			return err
		}
	}
	report, silent := outcome.Classify(outcome.ServiceFromEnv(), rec, haveRecord, time.Now())
	if silent {
		return nil
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

func slotFromSpec(path string) (runner.Record, error) {
	spec, err := jobspec.Read(path)
	if err != nil {
		return runner.Record{}, err
	}
	sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone)
	if err != nil {
		return runner.Record{}, err
	}
	slot := sched.Prev(time.Now()).UTC()
	return runner.Record{Slot: slot, Version: spec.Version, RunKey: runkey.Scheduled(spec.ID, slot)}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
