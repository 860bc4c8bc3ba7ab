package unitmgr

import (
	"context"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// Started is one run this node runs now, for the core's "running".
type Started struct {
	JobID string
	wire.RunStart
}

// Running lists the runs this node's cron services run now: a service
// that is starting and whose runner's record says "ran" and has not
// finished (a runner still electing, or one that lost, runs nothing). The
// service's invocation is read before and after the record, so the run
// reported is that activation's. known says an invocation was reported
// already: its record is not read again (a rewritten record must not
// make a second report), and it is listed by invocation alone. A service
// whose record or unit cannot be read is left out: the report is display
// only, and the run's outcome is its record.
func (m *Manager) Running(ctx context.Context, known func(invocation string) bool) ([]Started, error) {
	// Only busy services: every cron service stays loaded (its timer
	// triggers it), and this runs every few seconds on nodes with
	// thousands of them.
	loaded, err := m.sys.ListUnits(ctx, busyStates, []string{wire.UnitPrefix + "*" + extService})
	if err != nil {
		return nil, err
	}
	var out []Started
	for _, u := range loaded {
		if !busy(u.ActiveState) {
			continue
		}
		if st, ok := m.runningOf(ctx, u.Name, known); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// runningOf is Running for one service.
func (m *Manager) runningOf(ctx context.Context, service string, known func(string) bool) (Started, bool) {
	unit := strings.TrimSuffix(service, extService)
	_, jobID, ok := wire.SplitUnitName(unit)
	if !ok || !wire.ValidID(jobID) {
		return Started{}, false
	}
	inv, err := m.invocationOf(ctx, service)
	if err != nil || inv == "" {
		return Started{}, false
	}
	if known(inv) {
		return Started{JobID: jobID, RunStart: wire.RunStart{InvocationID: inv}}, true
	}
	owner, err := m.runNowHooks().owner(filepath.Join(m.layout.UnitDir, service))
	if err != nil {
		return Started{}, false
	}
	rec, err := outcome.RunningRecord(filepath.Join(m.cancelPaths().runtimeRoot, unit), owner)
	if err != nil || rec.Kind != runner.KindRan || rec.StartedAt == nil || rec.FinishedAt != nil ||
		!strings.HasPrefix(rec.RunKey, jobID+"#") || !m.stillInvocation(ctx, service, inv) {
		return Started{}, false
	}
	return Started{JobID: jobID, RunStart: wire.RunStart{RunKey: rec.RunKey, Version: rec.Version,
		ScheduledAt: rec.Slot, StartedAt: *rec.StartedAt, InvocationID: inv, Trigger: wire.Trigger(rec.Trigger)}}, true
}

// invocationOf is the service's InvocationID in hex ("" before its
// first activation).
func (m *Manager) invocationOf(ctx context.Context, service string) (string, error) {
	v, err := m.sys.UnitProperty(ctx, service, "", "InvocationID")
	if err != nil {
		return "", fmt.Errorf("%s: invocation: %w", service, err)
	}
	id, _ := v.([]byte)
	return hex.EncodeToString(id), nil
}

// stillInvocation reports whether the service still runs activation inv.
func (m *Manager) stillInvocation(ctx context.Context, service, inv string) bool {
	now, err := m.invocationOf(ctx, service)
	return err == nil && now == inv
}
