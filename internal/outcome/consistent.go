package outcome

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/runner"
)

// ErrContradicted marks a run record whose account of the run contradicts
// how systemd saw the runner (the unit's main process) end.
var ErrContradicted = errors.New("run record contradicts systemd")

// HoldToSystemd holds a record's account of the run against the runner's
// exit as systemd reports it ($EXIT_CODE, $EXIT_STATUS) and returns the
// record the hook may believe. The record is the tenant's to rewrite (its
// command runs as the runtime directory's owner); the runner's exit status
// is not. The runner ends every run with a status that names what it
// decided: ExitSkip for a run it did not run (silent kinds, overlap),
// ExitPlatformError for a platform error (also a "started" record it could
// not finish), 1 for a setup error, and the command's status (75 and 76
// mapped to 1, 128+N for signal N) for a run of the command.
//
// A record that disagrees is the tenant's word against systemd's, and
// systemd's wins: a claimed platform error, overlap or skip becomes the
// run of the command that the status shows, a claimed exit code or signal
// becomes the status. The error (ErrContradicted) says what was replaced,
// for the hook's log; the record returned is already corrected, and holding
// it again changes nothing.
//
// When the runner did not exit (killed by a signal: a timeout whose command
// ignored SIGTERM, the kernel's OOM killer) its status tells little, and
// the record is kept, except a claim that nothing ran (a silent kind, an
// overlap) or a platform error: the runner writes those just before it
// exits, so a killed runner makes them a run of the command. A "started"
// record of a killed runner stays (a hung shared storage, see Classify);
// the tenant can forge that one (docs/semantics.md).
func HoldToSystemd(svc Service, rec runner.Record) (runner.Record, error) {
	if svc.ExitCode != "exited" {
		if (runner.Silent(rec.Kind) || rec.Kind == runner.KindOverlap || rec.Kind == runner.KindPlatformError) && svc.ExitCode != "" {
			return contradicted(rec, runner.Record{Kind: runner.KindRan, StartedAt: rec.StartedAt},
				"record says %s but the runner was %s (%s)", rec.Kind, svc.ExitCode, svc.ExitStatus)
		}
		return rec, nil
	}
	status, err := strconv.Atoi(svc.ExitStatus)
	if err != nil || status < 0 || status > 255 {
		return rec, nil // not systemd's spelling: nothing to hold it against
	}
	switch {
	case status == runner.ExitSkip:
		if runner.Silent(rec.Kind) || rec.Kind == runner.KindOverlap || rec.Kind == runner.KindStarted {
			return rec, nil
		}
		// Nothing ran here, but which skip it was is lost with the record.
		return contradicted(rec, runner.Record{Kind: runner.KindContention},
			"record says %s but the runner exited %d (not run here)", rec.Kind, status)
	case status == runner.ExitPlatformError:
		if rec.Kind == runner.KindPlatformError || rec.Kind == runner.KindStarted {
			return rec, nil
		}
		return contradicted(rec, runner.Record{Kind: runner.KindPlatformError, Reason: "the runner reported a platform error; its run record was overwritten"},
			"record says %s but the runner exited %d (platform error)", rec.Kind, status)
	}
	// The runner exited with neither: the command ran (or, with 1, could
	// not start) and status is its exit.
	switch rec.Kind {
	case runner.KindSetupError:
		if status == 1 {
			return rec, nil
		}
	case runner.KindRan:
		if runnerStatus(rec) == status {
			return rec, nil
		}
	}
	return contradicted(rec, runner.Record{Kind: runner.KindRan, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt, ExitCode: &status},
		"record says %s (exit %s, signal %q) but the runner exited %d", rec.Kind, exitText(rec.ExitCode), rec.Signal, status)
}

// runnerStatus is the status the runner exits with for a run of the command
// the record describes (see runner.runCommand); -1 when it describes none.
func runnerStatus(rec runner.Record) int {
	if rec.Signal != "" {
		if s := unix.SignalNum(rec.Signal); s != 0 {
			return 128 + int(s)
		}
		return -1
	}
	if rec.ExitCode == nil {
		return -1
	}
	if c := *rec.ExitCode; c == runner.ExitSkip || c == runner.ExitPlatformError {
		return 1
	}
	return *rec.ExitCode
}

// contradicted keeps the run's identity (key, slot, version, trigger, node)
// and replaces its account with the one systemd supports.
func contradicted(rec, account runner.Record, format string, a ...any) (runner.Record, error) {
	account.RunKey, account.Slot, account.Version, account.Trigger, account.Node = rec.RunKey, rec.Slot, rec.Version, rec.Trigger, rec.Node
	return account, fmt.Errorf("%w: %s", ErrContradicted, fmt.Sprintf(format, a...))
}

func exitText(c *int) string {
	if c == nil {
		return "none"
	}
	return strconv.Itoa(*c)
}
