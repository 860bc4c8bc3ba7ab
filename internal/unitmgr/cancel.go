package unitmgr

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// A cancel stops the unit's service, but only while it runs the run that
// was named: the runner's record (in the service's runtime directory)
// says which run that is. Before the stop, the agent leaves a marker
// naming the run and the service's invocation; cron-outcome, which ends
// that same invocation, reports the run as cancelled when the marker
// matches (see outcome.Cancelled). systemd's stop sends SIGTERM to the
// whole cgroup and SIGKILL after the unit's TimeoutStopSec; ExecStopPost
// runs either way.

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

// CancelRun stops req's run if this node runs it now, and reports whether
// it did. A unit that is not here, not running, or running another run
// (the named one ended, the next slot began) is left alone: false, nil.
func (m *Manager) CancelRun(ctx context.Context, req wire.CancelRequest) (bool, error) {
	unit := req.Unit
	key, err := runkey.Parse(req.RunKey)
	if err != nil || !strings.HasPrefix(unit, wire.UnitPrefix) || !strings.HasSuffix(unit, "-"+key.JobID) || strings.ContainsAny(unit, "/\x00") {
		return false, fmt.Errorf("cancel: run %q is not a run of unit %q", req.RunKey, unit)
	}
	service := unit + extService
	unitFile := filepath.Join(m.layout.UnitDir, service)
	if _, err := os.Stat(unitFile); err != nil {
		return false, nil // not on this node
	}
	active, err := m.sys.UnitProperty(ctx, service, "", "ActiveState")
	if err != nil {
		return false, fmt.Errorf("cancel: %s: %w", service, err)
	}
	if s, _ := active.(string); !busy(s) {
		return false, nil
	}
	owner, err := m.runNowHooks().owner(unitFile)
	if err != nil {
		return false, fmt.Errorf("cancel: %s: %w", service, err)
	}
	p := m.cancelPaths()
	running, err := outcome.RunningKey(filepath.Join(p.runtimeRoot, unit), owner)
	if err != nil || running != req.RunKey {
		return false, nil // between runs, or another run: not this one
	}
	inv, err := m.sys.UnitProperty(ctx, service, "", "InvocationID")
	if err != nil {
		return false, fmt.Errorf("cancel: %s: invocation: %w", service, err)
	}
	id, ok := inv.([]byte)
	if !ok || len(id) == 0 {
		return false, fmt.Errorf("cancel: %s: no invocation id", service)
	}
	marker := wire.CancelMarker{RunKey: req.RunKey, InvocationID: hex.EncodeToString(id), At: m.now().UTC()}
	if err := writeCancelMarker(p.markerDir, unit, marker); err != nil {
		return false, err
	}
	if err := m.sys.StopUnit(ctx, service); err != nil {
		return false, fmt.Errorf("cancel: stop %s: %w", service, err)
	}
	m.log.Info("run cancelled: stopping its service", "unit", service, "run_key", req.RunKey)
	return true, nil
}

// writeCancelMarker leaves the marker cron-outcome reads: root's only, so
// the tenant can neither write one nor learn another tenant's.
func writeCancelMarker(dir, unit string, mk wire.CancelMarker) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cancel marker: %w", err)
	}
	b, err := json.Marshal(mk)
	if err != nil {
		return fmt.Errorf("cancel marker: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, unit+".json"), b, 0o600); err != nil {
		return fmt.Errorf("cancel marker: %w", err)
	}
	return nil
}
