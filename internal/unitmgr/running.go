package unitmgr

import (
	"context"
	"encoding/hex"
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
// that is starting and whose runner's record says "ran" (a runner still
// electing, or one that lost, runs nothing). A service whose record or
// unit cannot be read is left out: the report is display only, and the
// run's outcome is its record.
func (m *Manager) Running(ctx context.Context) ([]Started, error) {
	loaded, err := m.sys.ListUnits(ctx, []string{wire.UnitPrefix + "*" + extService})
	if err != nil {
		return nil, err
	}
	root := m.cancelPaths().runtimeRoot
	var out []Started
	for _, u := range loaded {
		if !busy(u.ActiveState) {
			continue
		}
		unit := strings.TrimSuffix(u.Name, extService)
		_, jobID, ok := wire.SplitUnitName(unit)
		if !ok {
			continue
		}
		owner, err := m.runNowHooks().owner(filepath.Join(m.layout.UnitDir, u.Name))
		if err != nil {
			continue
		}
		rec, err := outcome.RunningRecord(filepath.Join(root, unit), owner)
		if err != nil || rec.Kind != runner.KindRan || rec.StartedAt == nil || !strings.HasPrefix(rec.RunKey, jobID+"#") {
			continue
		}
		st := Started{JobID: jobID, RunStart: wire.RunStart{RunKey: rec.RunKey, Version: rec.Version,
			ScheduledAt: rec.Slot, StartedAt: *rec.StartedAt}}
		if v, err := m.sys.UnitProperty(ctx, u.Name, "", "InvocationID"); err == nil {
			if id, ok := v.([]byte); ok {
				st.InvocationID = hex.EncodeToString(id)
			}
		}
		out = append(out, st)
	}
	return out, nil
}
