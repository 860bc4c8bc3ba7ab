package unitmgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// A cancel signals the unit's runner, but only while it runs the run that
// was named: the runner's record (in the service's runtime directory)
// says which run that is, and systemd's InvocationID and MainPID, read
// before and after the record and after the runner's pidfd is opened,
// show the record and the pidfd are of one activation. (systemd's own stop
// cannot be aimed so: a stop queued as one run ends would stop the next,
// and its record would read as the tenant's failure.) The runner passes
// SIGTERM to the command's group and kills the group after KillGrace,
// as systemd's stop would. Before the signal, the agent leaves a marker
// naming the run and that invocation; cron-outcome, which ends that same
// invocation, reports the run as cancelled when the marker matches (see
// outcome.Cancelled).

// cancelPaths are where a cancel looks and writes; tests replace them.
type cancelPaths struct {
	runtimeRoot string // RuntimeDirectory's parent: /run/hostcron
	markerDir   string // wire.CancelDir
}

func (m *Manager) cancelPaths() cancelPaths {
	p := m.cancel
	if p.runtimeRoot == "" {
		p.runtimeRoot = filepath.Dir(wire.CancelDir)
	}
	if p.markerDir == "" {
		p.markerDir = wire.CancelDir
	}
	return p
}

// activation is who runs a service now, as systemd says.
type activation struct {
	invocation string // hex InvocationID
	mainPID    uint32 // the runner; 0 outside ExecStart
	active     string // ActiveState
}

func (m *Manager) activationOf(ctx context.Context, service string) (activation, error) {
	var a activation
	v, err := m.sys.UnitProperty(ctx, service, "", "ActiveState")
	if err != nil {
		return a, fmt.Errorf("cancel: %s: %w", service, err)
	}
	a.active, _ = v.(string)
	if a.invocation, err = m.invocationOf(ctx, service); err != nil {
		return a, fmt.Errorf("cancel: %w", err)
	}
	if v, err = m.sys.UnitProperty(ctx, service, "Service", "MainPID"); err != nil {
		return a, fmt.Errorf("cancel: %s: main pid: %w", service, err)
	}
	a.mainPID, _ = v.(uint32)
	return a, nil
}

// CancelRun signals req's run to end if this node runs it now, and reports
// whether it did. A unit that is not here, not running, or running another
// run (the named one ended, the next slot began) is left alone: false, nil.
func (m *Manager) CancelRun(ctx context.Context, req wire.CancelRequest) (bool, error) {
	unit := req.Unit
	key, err := runkey.Parse(req.RunKey)
	if err != nil || !strings.HasPrefix(unit, wire.UnitPrefix) || !strings.HasSuffix(unit, "-"+key.JobID) || strings.ContainsAny(unit, "/\x00") {
		return false, fmt.Errorf("cancel: run %q is not a run of unit %q", req.RunKey, unit)
	}
	return m.signalRunner(ctx, unit, "run cancelled: its runner was told to stop", func(rec runner.Record) bool {
		// Only a runner whose record says "ran" runs the named run: before
		// that it may still be electing (a loser on this node names the
		// same slot, and another node runs it) or switch to a run-now
		// request. A catch-up of the named slot that has not started its
		// command yet (waitingCatchUp) is stopped too, and runs nothing.
		return rec.RunKey == req.RunKey && (rec.Kind == runner.KindRan || waitingCatchUp(rec))
	})
}

// waitingCatchUp says rec is a catch-up's runner that has not started the
// command, or a slot's runner that may wait for the previous run
// (overlap_policy buffer_one or cancel_previous: Waiting, from its first
// record until it says "ran"): it waits or elects, catching
// SIGTERM (runner.Run), and a SIGTERM makes it exit silently, running
// nothing. An on-time runner that elects is never one: a signal would
// kill it, and its record would read as the tenant's failure.
func waitingCatchUp(rec runner.Record) bool {
	return rec.Kind == runner.KindStarted && (rec.Trigger == string(wire.TriggerCatchUp) || rec.Waiting)
}

// endCatchUp stops unit's catch-up if one waits to run: the job is being
// disabled, deleted or changed, and the catch-up was decided under the
// spec that is going (a run now under way is left alone: a disable does
// not kill a run). The runner exits silently; nothing is reported.
func (m *Manager) endCatchUp(ctx context.Context, unit string) error {
	_, err := m.signalRunner(ctx, unit, "catch-up stopped before its command started: the job changed", waitingCatchUp)
	return err
}

// signalRunner sends SIGTERM to unit's runner if its record, read within
// one activation, is one that want accepts, leaving a cancel marker for
// the record's run first, and logs why; it reports whether it did. A unit
// that is not here or not running is left alone: false, nil.
func (m *Manager) signalRunner(ctx context.Context, unit, why string, want func(runner.Record) bool) (bool, error) {
	service := unit + extService
	unitFile := filepath.Join(m.layout.UnitDir, service)
	if _, err := os.Stat(unitFile); err != nil {
		return false, nil // not on this node
	}
	before, err := m.activationOf(ctx, service)
	if err != nil || !busy(before.active) || before.mainPID == 0 || before.invocation == "" {
		return false, err // not running, or between ExecStart and ExecStopPost
	}
	owner, err := m.runNowHooks().owner(unitFile)
	if err != nil {
		return false, fmt.Errorf("cancel: %s: %w", service, err)
	}
	p := m.cancelPaths()
	rec, err := outcome.RunningRecord(filepath.Join(p.runtimeRoot, unit), owner)
	if err != nil || !want(rec) {
		return false, nil // between runs, or not a runner to stop
	}
	pidfd, err := unix.PidfdOpen(int(before.mainPID), 0)
	if err != nil {
		return false, nil // the runner has just ended
	}
	defer unix.Close(pidfd)
	after, err := m.activationOf(ctx, service)
	if err != nil || after != before {
		return false, err // the activation moved on while it was looked at
	}
	// The marker also covers a catch-up that wrote "ran" between the
	// record's read and the signal: its run is then reported as cancelled,
	// not as the tenant's failure.
	marker := wire.CancelMarker{RunKey: rec.RunKey, InvocationID: before.invocation, At: m.now().UTC()}
	markerPath, err := writeCancelMarker(p.markerDir, unit, marker)
	if err != nil {
		return false, err
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGTERM, nil, 0); err != nil {
		_ = os.Remove(markerPath) // nothing was stopped: the marker must not relabel the run
		if errors.Is(err, unix.ESRCH) {
			return false, nil // it ended on its own first
		}
		return false, fmt.Errorf("cancel: signal %s's runner: %w", service, err)
	}
	m.log.Info(why, "unit", service, "run_key", rec.RunKey, "invocation", before.invocation)
	return true, nil
}

// writeCancelMarker leaves the marker cron-outcome reads: root's only, so
// the tenant can neither write one nor learn another tenant's.
func writeCancelMarker(dir, unit string, mk wire.CancelMarker) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("cancel marker: %w", err)
	}
	b, err := json.Marshal(mk)
	if err != nil {
		return "", fmt.Errorf("cancel marker: %w", err)
	}
	path := filepath.Join(dir, unit+".json")
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return "", fmt.Errorf("cancel marker: %w", err)
	}
	return path, nil
}
