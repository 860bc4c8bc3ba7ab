package unitmgr

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// RunNow starts one run of a job's service outside its schedule. The
// request file names the request, so the runner keys the run by it and
// the shared run-now stamp runs it once however often it is started.
func (m *Manager) RunNow(ctx context.Context, req wire.RunNowRequest) error {
	unit := req.Unit
	if !runkey.ValidRequest(req.Request) {
		return fmt.Errorf("run now: request id %q is not valid", req.Request)
	}
	if !strings.HasPrefix(unit, wire.UnitPrefix) || strings.ContainsAny(unit, "/\x00") {
		return fmt.Errorf("run now: %q is not a cron unit", unit)
	}
	if _, err := os.Stat(filepath.Join(m.layout.UnitDir, unit+".service")); err != nil {
		return fmt.Errorf("run now: %s is not on this node: %w", unit, err)
	}
	if err := os.MkdirAll(wire.RunNowDir, 0o755); err != nil {
		return fmt.Errorf("run now: %w", err)
	}
	body := req.Request + "\n" + time.Now().UTC().Truncate(time.Second).Format(time.RFC3339) + "\n"
	if _, err := writeIfChanged(filepath.Join(wire.RunNowDir, unit), []byte(body), 0o644); err != nil {
		return fmt.Errorf("run now: %w", err)
	}
	if err := m.sys.StartUnit(ctx, unit+".service"); err != nil {
		return fmt.Errorf("run now: start %s: %w", unit, err)
	}
	return nil
}
