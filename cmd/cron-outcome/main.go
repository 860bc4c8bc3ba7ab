// Command cron-outcome runs as ExecStopPost=+ of every cron service: it
// classifies how the run ended and reports it to the core API, or spools
// the report for the node agent to deliver. It never fails the unit and
// never takes more than a few seconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
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
	if !wire.ValidID(jobID) || !units.ValidTenant(tenant) {
		return errors.New("HOSTCRON_CRON_JOB_ID/HOSTCRON_TENANT missing: not run from a hostcron unit")
	}
	// Only the runner's local record names the run: it writes it before
	// it touches shared storage. Recomputing a slot from the clock here
	// would report a hung run under another slot's key. Without a record
	// (or a key) the runner never named a run; the core's sweeper records
	// a slot nobody reported as lost.
	// The record is the tenant's to write: only a run key, slot and version
	// that check out name the run; other values that do not check out are
	// dropped and systemd's view is reported instead.
	rec, details, err := readRecord(filepath.Join(cfg.SpecDir, units.Name(tenant, jobID)+".json"), jobID, log)
	if err != nil {
		return fmt.Errorf("no usable run record, nothing to report: %w", err)
	}
	svc := outcome.ServiceFromEnv()
	if details {
		var herr error
		if rec, herr = outcome.HoldToSystemd(svc, rec); herr != nil {
			log.Warn("run record contradicts systemd, reporting what systemd saw", "run_key", rec.RunKey, "err", herr)
		}
	}
	report, silent := outcome.Classify(svc, rec, details, time.Now())
	if silent {
		return nil
	}
	report = cancelled(report, units.Name(tenant, jobID), log)
	report = shutDown(ctx, report, log)
	if inv := os.Getenv("INVOCATION_ID"); wire.ValidInvocationID(inv) {
		report.InvocationID = inv // systemd's, for this activation: the run's output carries it
	}
	if rec.RunKey == "" {
		return fmt.Errorf("run record names no run (%s: %s), nothing to report", rec.Kind, rec.Reason)
	}
	client := outcome.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential, HTTP: &http.Client{Timeout: deadline / 2}}
	return deliver(ctx, client, cfg.SpoolDir, jobID, report, log)
}

// deliver posts the report, or keeps it in the spool for the node agent
// to deliver: as a dead letter when the core refuses it for good, to be
// retried when it cannot be reached.
func deliver(ctx context.Context, client outcome.Client, spoolDir, jobID string, report wire.Outcome, log *slog.Logger) error {
	err := client.Post(ctx, jobID, report)
	switch {
	case err == nil:
		log.Info("outcome reported", "run_key", report.RunKey, "result", report.Result)
		return nil
	case errors.Is(err, outcome.ErrPermanent):
		// Kept, not dropped: the run happened (a node clock far ahead
		// makes every report "in the future"); the node agent's state
		// counts dead letters.
		if derr := outcome.SpoolDead(spoolDir, jobID, report, err); derr != nil {
			// Not lost either way: spooled, the agent's redelivery posts it
			// again and dead-letters it as the core refuses it.
			log.Warn("dead-letter failed, spooling the outcome instead", "run_key", report.RunKey, "err", derr)
			return errors.Join(err, derr, outcome.Spool(spoolDir, jobID, report))
		}
		return fmt.Errorf("%w (dead-lettered in %s)", err, filepath.Join(spoolDir, outcome.DeadLetterDir))
	}
	log.Warn("core API unreachable, spooling outcome", "run_key", report.RunKey, "err", err)
	return outcome.Spool(spoolDir, jobID, report)
}

// cancelled applies the node agent's cancel marker for the unit, if it
// names this run and this activation, and removes a marker that named
// this activation: it is spent.
func cancelled(report wire.Outcome, unit string, log *slog.Logger) wire.Outcome {
	mk, err := outcome.ReadCancelMarker(wire.CancelDir, unit)
	if err != nil {
		log.Warn("cancel marker unreadable, reporting the run as it ended", "err", err)
		return report
	}
	inv := os.Getenv("INVOCATION_ID")
	report = outcome.Cancelled(report, mk, inv)
	if mk != nil && inv != "" && mk.InvocationID == inv {
		if err := os.Remove(filepath.Join(wire.CancelDir, unit+".json")); err != nil {
			log.Warn("cancel marker not removed", "err", err)
		}
	}
	return report
}

// readRecord reads the tenant-owned run record as hostile input, holding it
// against the root-only job specs and the unit's environment.
func readRecord(specPath, jobID string, log *slog.Logger) (runner.Record, bool, error) {
	specs, err := trustedSpecs(specPath, jobID, log)
	if err != nil {
		return runner.Record{}, false, err
	}
	dir := os.Getenv("RUNTIME_DIRECTORY")
	uid, err := outcome.RuntimeDirOwner(dir, os.Getenv("USER"))
	if err != nil {
		return runner.Record{}, false, err
	}
	rec, err := outcome.ReadRecord(dir, outcome.Expect{JobID: jobID, UID: uid, Specs: specs, Now: time.Now()})
	if errors.Is(err, outcome.ErrBadDetails) {
		log.Warn("run record details refused, reporting what systemd saw", "run_key", rec.RunKey, "err", err)
		return rec, false, nil
	}
	return rec, err == nil, err
}

// trustedSpecs returns what a record's slot and version are held against:
// the job spec as it is now, and the specs a schedule change or a delete
// replaced, which the node agent keeps in {spec_dir}/previous (see
// jobspec.KeepReplaced). The run's own copy ($CREDENTIALS_DIRECTORY) is of
// no help: systemd 252 removes it before ExecStopPost runs (seen on the
// test nodes). All of them are root's; the tenant can write none.
func trustedSpecs(specPath, jobID string, log *slog.Logger) ([]outcome.KnownSpec, error) {
	paths := []string{specPath}
	kept, err := jobspec.Kept(filepath.Dir(specPath), strings.TrimSuffix(filepath.Base(specPath), ".json"))
	if err != nil {
		log.Warn("kept job specs not listed", "err", err)
	}
	paths = append(paths, kept...)
	var specs []outcome.KnownSpec
	var errs []error
	for _, p := range paths {
		s, err := knownSpec(p, jobID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		specs = append(specs, s)
	}
	if len(specs) == 0 {
		return nil, errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		// A deleted job has no current spec, only kept ones: not news.
		level := slog.LevelWarn
		if errors.Is(err, fs.ErrNotExist) {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "a job spec is unreadable, holding the record against the others", "err", err)
	}
	return specs, nil
}

// knownSpec reads one of the job's specs.
func knownSpec(path, jobID string) (outcome.KnownSpec, error) {
	spec, err := jobspec.Read(path)
	if err != nil {
		return outcome.KnownSpec{}, err
	}
	if spec.ID != jobID {
		return outcome.KnownSpec{}, fmt.Errorf("job spec %s is of job %s, not %s", path, spec.ID, jobID)
	}
	sched, err := schedule.ParseWithSeconds(spec.Schedule, spec.Timezone)
	if err != nil {
		return outcome.KnownSpec{}, fmt.Errorf("job spec %s: %w", path, err)
	}
	return outcome.KnownSpec{Version: spec.Version, Fires: sched.Matches, OverlapPolicy: spec.OverlapPolicy.OrSkip()}, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
