package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
)

// The audit trail: every change of a job records who made it (its actor)
// in the change's own transaction, so a change without its event, or an
// event of a change that rolled back, cannot exist.

// ActorSystem is the actor of what the core does on its own: auto-disable,
// its lifting, provisioning verdicts, the end of a delete.
const ActorSystem = "system"

type actorKey struct{}

// WithActor names who the changes made with ctx are made by: "key:<id>"
// for an API key, "admin" for the bootstrap key.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf is ctx's actor; a change without one is the system's.
func actorOf(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	return ActorSystem
}

// JobEvent is one entry of a job's trail.
type JobEvent struct {
	ID      int64          `json:"id"`
	At      time.Time      `json:"at"`
	Actor   string         `json:"actor"`
	Action  string         `json:"action"`
	Version int64          `json:"version"`
	Detail  map[string]any `json:"detail"`
}

// recordEvent appends to a job's trail inside tx.
func recordEvent(ctx context.Context, tx pgx.Tx, j CronJob, actor, action string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("job event: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO cron_job_events (cron_job_id, tenant_id, actor, action, version, detail)
		VALUES ($1, $2, $3, $4, $5, $6)`, j.ID, j.TenantID, actor, action, j.Version, b); err != nil {
		return fmt.Errorf("job event %s: %w", action, err)
	}
	return nil
}

// changedFields names the tenant-settable fields an update changed (not
// their values: the job shows those, and a command may hold a secret the
// trail need not copy).
func changedFields(before, after JobFields) []string {
	var out []string
	add := func(name string, changed bool) {
		if changed {
			out = append(out, name)
		}
	}
	add("webroot_id", before.WebrootID != after.WebrootID)
	add("schedule", before.Schedule != after.Schedule)
	add("timezone", before.Timezone != after.Timezone)
	add("command", before.Command != after.Command)
	add("working_directory", before.WorkingDirectory != after.WorkingDirectory)
	add("enabled", before.Enabled != after.Enabled)
	add("timeout_seconds", before.TimeoutSeconds != after.TimeoutSeconds)
	add("max_memory_mb", before.MaxMemoryMB != after.MaxMemoryMB)
	add("max_failures", before.MaxFailures != after.MaxFailures)
	add("environment", !maps.Equal(before.Environment, after.Environment))
	add("catchup_window_seconds", before.CatchUpWindowSeconds != after.CatchUpWindowSeconds)
	add("overlap_policy", before.OverlapPolicy != after.OverlapPolicy)
	add("retries", before.Retries != after.Retries)
	add("retry_delay_seconds", before.RetryDelaySeconds != after.RetryDelaySeconds)
	return out
}

// ListJobEvents returns a job's trail newest first: at most limit events
// older than the event before (0: from the newest).
func (s *Store) ListJobEvents(ctx context.Context, jobID string, before int64, limit int) ([]JobEvent, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, version, detail FROM cron_job_events
		WHERE cron_job_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, jobID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list job events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobEvent, error) {
		var e JobEvent
		err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Version, &e.Detail)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list job events: %w", err)
	}
	return events, nil
}

// DeleteEventsBefore prunes the trail with the run history's retention,
// in batches (deleteBatched), as DeleteRunsBefore does.
func (c Chores) DeleteEventsBefore(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := c.deleteBatched(ctx, `DELETE FROM cron_job_events WHERE id IN
		(SELECT id FROM cron_job_events WHERE at < $1 LIMIT 5000)`, cutoff)
	if err != nil {
		return n, fmt.Errorf("prune job events: %w", err)
	}
	return n, nil
}
