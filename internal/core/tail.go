package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/store"
)

// lokiTail reads a run's output tail from the log store, for the
// disable_warning notification.
type lokiTail struct {
	logs  *logship.Client
	store *store.Store
}

// tailLines bounds the lines one tail query reads.
const tailLines = 50

// OutputTail queries the job's cron log lines during the run (the
// tenant logs API's query: the tenant selector always present) and
// keeps the last notify.MaxTailBytes.
func (l lokiTail) OutputTail(ctx context.Context, d store.Delivery) (string, error) {
	var p struct {
		ScheduledAt    time.Time  `json:"scheduled_at"`
		StartedAt      *time.Time `json:"started_at"`
		FinishedAt     *time.Time `json:"finished_at"`
		TimeoutSeconds int        `json:"timeout_seconds"`
	}
	if err := json.Unmarshal(d.Payload, &p); err != nil {
		return "", fmt.Errorf("output tail: payload: %w", err)
	}
	start, end := runWindow(p.ScheduledAt, p.StartedAt, p.FinishedAt, p.TimeoutSeconds)
	tenant, err := l.store.GetTenant(ctx, d.TenantID)
	if err != nil {
		return "", fmt.Errorf("output tail: %w", err)
	}
	lines, err := l.logs.QueryRange(ctx, logship.CronLogQuery(tenant.Name, d.CronJobID, "", ""), start, end, tailLines)
	if err != nil {
		return "", fmt.Errorf("output tail: %w", err)
	}
	text := make([]string, len(lines))
	for i, ln := range lines {
		text[i] = ln.Line
	}
	slices.Reverse(text) // Loki answers newest first
	return notify.Tail(text, notify.MaxTailBytes), nil
}

// runWindow is when a run's output was written: from its start (or slot)
// to its end (or the slot plus its timeout), with a little slack for
// clocks.
func runWindow(slot time.Time, started, finished *time.Time, timeoutSeconds int) (time.Time, time.Time) {
	start, end := slot, slot.Add(time.Duration(timeoutSeconds)*time.Second)
	if started != nil {
		start = *started
	}
	if finished != nil {
		end = *finished
	}
	return start.Add(-2 * time.Second), end.Add(5 * time.Second)
}
