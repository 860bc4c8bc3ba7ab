package unitmgr

import (
	"context"
	"log/slog"
	"time"
)

// phaseTimer adds up where an observe or an apply spends its time, by
// phase, so a slow converge says which part was slow (issue 16: file
// reads, D-Bus listing, syncs, enable, reload, starts).
type phaseTimer struct {
	last  time.Time
	start time.Time
	order []string
	took  map[string]time.Duration
}

func newPhaseTimer() *phaseTimer {
	now := time.Now()
	return &phaseTimer{last: now, start: now, took: map[string]time.Duration{}}
}

// lap charges the time since the previous lap to phase.
func (t *phaseTimer) lap(phase string) {
	now := time.Now()
	if _, seen := t.took[phase]; !seen {
		t.order = append(t.order, phase)
	}
	t.took[phase] += now.Sub(t.last)
	t.last = now
}

// attrs are the phases in the order first seen, in milliseconds, and the total.
func (t *phaseTimer) attrs() []any {
	out := make([]any, 0, 2*len(t.order)+2)
	for _, p := range t.order {
		out = append(out, slog.Float64(p+"_ms", ms(t.took[p])))
	}
	return append(out, slog.Float64("total_ms", ms(time.Since(t.start))))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// slowApply is how long an apply may take before its phases are logged
// at info level: converges of large shards, not the single-job applies.
const slowApply = time.Second

// logPhases logs t: at info for a reconcile (a converge, a few times an
// hour) or anything slow, at debug otherwise.
func (m *Manager) logPhases(req Request, msg string, t *phaseTimer, extra ...any) {
	level := slog.LevelDebug
	if req.Op == OpReconcile || time.Since(t.start) >= slowApply {
		level = slog.LevelInfo
	}
	m.log.Log(context.Background(), level, msg, append(append([]any{"op", req.Op}, extra...), t.attrs()...)...)
}

// bigPlan is how many steps make an apply's phases worth an info line
// however fast it was.
const bigPlan = 100

// logPhases logs where the run of a plan of n steps spent its time.
func (e *executor) logPhases(t *phaseTimer, n int) {
	level := slog.LevelDebug
	if n >= bigPlan || time.Since(t.start) >= slowApply {
		level = slog.LevelInfo
	}
	e.log.Log(context.Background(), level, "applied", append([]any{"steps", n}, t.attrs()...)...)
}
