package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/notify"
)

// Operator notifications: targets without a tenant (tenant_id NULL) for
// shard-level events, which notify.OperatorKinds lists. A tenant key never
// reaches them: every tenant query matches on a tenant id, which NULL
// never equals.

// MaxOperatorTargets bounds the operator's targets, as
// MaxTargetsPerTenant bounds a tenant's.
const MaxOperatorTargets = 20

// operatorTargetsLock is the advisory lock that makes the operator's
// target count and insert one step (there is no tenant row to lock).
const operatorTargetsLock = 0x686f7374_6f707472 // "hostoptr"

// CreateOperatorTarget stores an operator target (t.TenantID empty), for
// one shard (t.ShardID, which must exist: ErrNotFound) or all of them.
func (s *Store) CreateOperatorTarget(ctx context.Context, t NotificationTarget) (NotificationTarget, error) {
	if t.TenantID != "" || t.CronJobID != nil {
		return t, errors.New("create operator target: an operator target has no tenant and no job")
	}
	var out NotificationTarget
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(operatorTargetsLock)); err != nil {
			return fmt.Errorf("create operator target: lock: %w", err)
		}
		var n int
		var shardOK bool
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM notification_targets WHERE tenant_id IS NULL),
			$1::uuid IS NULL OR EXISTS (SELECT 1 FROM shards WHERE id = $1)`, t.ShardID).Scan(&n, &shardOK); err != nil {
			return fmt.Errorf("create operator target: %w", err)
		}
		if !shardOK {
			return fmt.Errorf("create operator target: shard: %w", ErrNotFound)
		}
		if n >= MaxOperatorTargets {
			return fmt.Errorf("%w: at most %d operator targets", ErrTooManyTargets, MaxOperatorTargets)
		}
		var err error
		out, err = scanTarget(tx.QueryRow(ctx, `
			INSERT INTO notification_targets (shard_id, kind, url, secret, address, events)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING `+targetColumns,
			t.ShardID, t.Kind, t.URL, t.Secret, t.Address, t.Events))
		return wrap(err, "create operator target")
	})
	return out, err
}

// ListOperatorTargets returns the operator's targets, oldest first.
func (s *Store) ListOperatorTargets(ctx context.Context) ([]NotificationTarget, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+targetColumns+` FROM notification_targets
		WHERE tenant_id IS NULL ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list operator targets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NotificationTarget, error) { return scanTarget(r) })
	if err != nil {
		return nil, fmt.Errorf("list operator targets: %w", err)
	}
	if out == nil {
		out = []NotificationTarget{}
	}
	return out, nil
}

// Occurrence is one or more occurrences of an operator event kind on a
// shard, at a time (which decides the aggregation window), with examples
// (each a JSON object: a job, a node, a reason).
type Occurrence struct {
	ShardID  string
	Kind     notify.Kind
	At       time.Time
	Count    int
	Examples []map[string]any
	// Once: only the window's first occurrence counts (a periodic check
	// that finds the same fault at every tick adds nothing to its event).
	Once bool
}

// operatorSubscribed reports whether an operator target wants kind on
// shard, and the transaction's clock: the windows are read from it, so
// every core puts an occurrence into the same window.
func operatorSubscribed(ctx context.Context, q querier, shardID string, kind notify.Kind) (bool, time.Time, error) {
	var ok bool
	var now time.Time
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM notification_targets WHERE tenant_id IS NULL
		AND (shard_id IS NULL OR shard_id = $1::uuid) AND $2 = ANY(events)), now()`, shardID, string(kind)).Scan(&ok, &now)
	return ok, now, wrap(err, "operator targets")
}

// emitOperator writes an occurrence into its window's event of the shard
// and kind, in the caller's transaction (the outbox): the first of a
// window inserts the event and a pending delivery for every operator
// target subscribed to the kind on that shard; later ones add their
// count and, up to notify.MaxExamples in all, their examples. Nothing is
// written when no operator target wants it. A delivery carries the event
// as it is when claimed: occurrences after it only update the stored
// event (its count is the window's).
func emitOperator(ctx context.Context, q dbtx, o Occurrence) error {
	examples, err := json.Marshal(o.Examples)
	if err != nil || o.Examples == nil {
		examples = []byte("[]")
	}
	start := notify.WindowStart(o.At)
	added := o.Count
	if o.Once {
		added = 0
	}
	// The window's first occurrence writes the event and its deliveries.
	// A later one only adds to the count, and only if no other
	// transaction holds the event (SKIP LOCKED): a hot row held through
	// every outcome's commit would serialise a shard-wide fault's
	// outcomes, and the count is a lower bound anyway (a delivery sends
	// the event as it is when claimed).
	var inserted bool
	err = q.QueryRow(ctx, `
		WITH ev AS (
			INSERT INTO notification_events (shard_id, kind, run_key, payload)
			SELECT $1::uuid, $2, $3, jsonb_build_object('shard_id', $1::text,
			       'shard_name', (SELECT name FROM shards WHERE id = $1::uuid),
			       'window_start', $4::timestamptz, 'window_end', $5::timestamptz,
			       'count', $6::int, 'examples', $7::jsonb)
			WHERE EXISTS (SELECT 1 FROM notification_targets t WHERE t.tenant_id IS NULL
			              AND (t.shard_id IS NULL OR t.shard_id = $1::uuid) AND $2 = ANY(t.events))
			ON CONFLICT (shard_id, kind, run_key) WHERE cron_job_id IS NULL DO NOTHING
			RETURNING id, shard_id, kind),
		dl AS (
			INSERT INTO notification_deliveries (event_id, target_id, tenant_id, channel)
			SELECT ev.id, t.id, NULL, t.kind FROM ev JOIN notification_targets t
			  ON t.tenant_id IS NULL AND (t.shard_id IS NULL OR t.shard_id = ev.shard_id) AND ev.kind = ANY(t.events))
		SELECT EXISTS (SELECT 1 FROM ev)`,
		o.ShardID, string(o.Kind), notify.OperatorKey(o.Kind, o.At), start, start.Add(notify.OperatorWindow),
		o.Count, examples).Scan(&inserted)
	if err != nil || inserted || added == 0 {
		return wrap(err, "operator event "+string(o.Kind))
	}
	_, err = q.Exec(ctx, `
		UPDATE notification_events e SET payload = e.payload || jsonb_build_object(
		    'count', (e.payload->>'count')::int + $4::int,
		    'examples', (SELECT coalesce(jsonb_agg(x ORDER BY i), '[]') FROM jsonb_array_elements(
		                   e.payload->'examples' || $5::jsonb) WITH ORDINALITY AS a(x, i) WHERE i <= $6))
		WHERE e.id = (SELECT id FROM notification_events WHERE shard_id = $1::uuid AND kind = $2 AND run_key = $3
		              AND cron_job_id IS NULL FOR UPDATE SKIP LOCKED)`,
		o.ShardID, string(o.Kind), notify.OperatorKey(o.Kind, o.At), added, examples, notify.MaxExamples)
	return wrap(err, "operator event "+string(o.Kind))
}

// notifyOperatorOutcome emits platform_error for an outcome that recorded
// one (notify.OutcomeOperatorKind), in its transaction.
func notifyOperatorOutcome(ctx context.Context, tx pgx.Tx, node Node, job CronJob, duplicate bool, o Outcome) error {
	kind, ok := notify.OutcomeOperatorKind(notify.Recorded{Duplicate: duplicate, Result: o.Result})
	if !ok {
		return nil
	}
	want, now, err := operatorSubscribed(ctx, tx, node.ShardID, kind)
	if err != nil || !want {
		return err
	}
	return emitOperator(ctx, tx, Occurrence{ShardID: node.ShardID, Kind: kind, At: now, Count: 1,
		Examples: []map[string]any{{"cron_job_id": job.ID, "tenant_id": job.TenantID, "node_id": node.ID,
			"node_name": node.Name, "run_key": o.RunKey, "failure_reason": notify.Truncate(o.FailureReason)}}})
}

// notifyUnrun emits slots_unrun for the lost runs a sweep batch wrote
// (lost: by job), one occurrence per shard, in the batch's transaction.
func notifyUnrun(ctx context.Context, tx pgx.Tx, lost map[string]int) error {
	if len(lost) == 0 {
		return nil
	}
	ids := make([]string, 0, len(lost))
	for id := range lost {
		ids = append(ids, id)
	}
	shards, err := Chores{tx}.JobShards(ctx, ids)
	if err != nil {
		return err
	}
	byShard := map[string]int{}
	examples := map[string][]map[string]any{}
	for id, n := range lost {
		s := shards[id]
		byShard[s] += n
		if len(examples[s]) < notify.MaxExamples {
			examples[s] = append(examples[s], map[string]any{"cron_job_id": id, "lost": n})
		}
	}
	for _, sc := range notify.UnrunShards(byShard) {
		want, now, err := operatorSubscribed(ctx, tx, sc.ShardID, notify.SlotsUnrun)
		if err != nil {
			return err
		}
		if want {
			o := Occurrence{ShardID: sc.ShardID, Kind: notify.SlotsUnrun, At: now, Count: sc.Count, Examples: examples[sc.ShardID]}
			if err := emitOperator(ctx, tx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// RecordConverge stores the result of a node's converge (errText empty:
// it succeeded). A failure emits node_not_converged for the node's shard
// in the same transaction; a node not found (deleted meanwhile) is no
// error.
func (s *Store) RecordConverge(ctx context.Context, nodeID, errText string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var n notify.NodeConvergence
		err := tx.QueryRow(ctx, `UPDATE nodes SET
			converged_at = CASE WHEN $2 = '' THEN now() ELSE converged_at END,
			converge_failed_at = CASE WHEN $2 = '' THEN converge_failed_at ELSE now() END,
			converge_error = CASE WHEN $2 = '' THEN converge_error ELSE $2 END
			WHERE id = $1 RETURNING `+convergenceColumns, nodeID, notify.Truncate(errText)).Scan(convergenceDest(&n)...)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("record converge of node %s: %w", nodeID, err)
		}
		if errText == "" {
			return nil
		}
		return emitNotConverged(ctx, tx, n.ShardID, []notify.NodeConvergence{n}, *n.FailedAt, nil)
	})
}

const convergenceColumns = `id::text, shard_id::text, name, draining, converge_watched_from, converged_at, converge_failed_at, converge_error`

func convergenceDest(n *notify.NodeConvergence) []any {
	return []any{&n.NodeID, &n.ShardID, &n.Name, &n.Draining, &n.WatchedFrom, &n.ConvergedAt, &n.FailedAt, &n.Error}
}

// emitNotConverged emits one node_not_converged occurrence for the nodes
// of a shard (reasons by node id; nil: notify.NotConverged at at).
func emitNotConverged(ctx context.Context, q dbtx, shardID string, nodes []notify.NodeConvergence, at time.Time, reasons map[string]string) error {
	want, _, err := operatorSubscribed(ctx, q, shardID, notify.NodeNotConverged)
	if err != nil || !want || len(nodes) == 0 {
		return err
	}
	var examples []map[string]any
	for _, n := range nodes {
		reason, ok := reasons[n.NodeID]
		if !ok {
			reason = "converge failed: " + n.Error
		}
		if len(examples) < notify.MaxExamples {
			examples = append(examples, map[string]any{"node_id": n.NodeID, "node_name": n.Name, "reason": reason})
		}
	}
	return emitOperator(ctx, q, Occurrence{ShardID: shardID, Kind: notify.NodeNotConverged, At: at, Count: len(nodes),
		Examples: examples, Once: reasons != nil})
}

// CheckConvergence emits node_not_converged, once per shard and window
// (repeated checks add to the window's event), for every node
// notify.NotConverged reports at now: a periodic duty of the
// housekeeping leader, so a node whose converges stopped being reported
// at all (the workflow engine down, the node gone silent) is noticed too.
// It returns how many nodes are not converged.
func (c Chores) CheckConvergence(ctx context.Context, now time.Time, threshold time.Duration) (int, error) {
	rows, err := c.db.Query(ctx, `SELECT `+convergenceColumns+` FROM nodes ORDER BY shard_id, name`)
	if err != nil {
		return 0, fmt.Errorf("check convergence: %w", err)
	}
	byShard := map[string][]notify.NodeConvergence{}
	reasons := map[string]string{}
	var shards []string
	var n notify.NodeConvergence
	_, err = pgx.ForEachRow(rows, convergenceDest(&n), func() error {
		if reason, bad := notify.NotConverged(n, now, threshold); bad {
			if byShard[n.ShardID] == nil {
				shards = append(shards, n.ShardID)
			}
			byShard[n.ShardID] = append(byShard[n.ShardID], n)
			reasons[n.NodeID] = reason
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("check convergence: %w", err)
	}
	total := 0
	for _, s := range shards {
		total += len(byShard[s])
		if err := emitNotConverged(ctx, c.db, s, byShard[s], now, reasons); err != nil {
			return total, fmt.Errorf("check convergence: %w", err)
		}
	}
	return total, nil
}

// CheckConvergence is Chores.CheckConvergence on the store's pool.
func (s *Store) CheckConvergence(ctx context.Context, now time.Time, threshold time.Duration) (int, error) {
	return Chores{s.pool}.CheckConvergence(ctx, now, threshold)
}
