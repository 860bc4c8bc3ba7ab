package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/notify"
	"github.com/hostcron/hostcron/internal/notify/mail"
	"github.com/hostcron/hostcron/internal/wire"
)

// NotificationTarget is where a tenant wants its jobs' events: a webhook
// (URL, secret) or an e-mail address, for every job of the tenant or one.
// The secret is never shown after the create that made it.
type NotificationTarget struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id,omitempty"` // empty: an operator target
	CronJobID *string   `json:"cron_job_id"`
	ShardID   *string   `json:"shard_id,omitempty"` // an operator target's shard; nil: every shard
	Kind      string    `json:"kind"`               // webhook, email
	URL       string    `json:"url,omitempty"`
	Address   string    `json:"address,omitempty"`
	Events    []string  `json:"events"`
	HasSecret bool      `json:"has_secret"`
	CreatedAt time.Time `json:"created_at"`
	Secret    string    `json:"-"`
}

const targetColumns = `id, coalesce(tenant_id::text, ''), cron_job_id, shard_id, kind, url, address, events, secret <> '', created_at, secret`

func scanTarget(row pgx.Row) (NotificationTarget, error) {
	var t NotificationTarget
	err := row.Scan(&t.ID, &t.TenantID, &t.CronJobID, &t.ShardID, &t.Kind, &t.URL, &t.Address, &t.Events, &t.HasSecret, &t.CreatedAt, &t.Secret)
	return t, err
}

// MaxTargetsPerTenant bounds the targets of one tenant: every recorded
// failure fans out to each.
const MaxTargetsPerTenant = 20

// ErrTooManyTargets refuses a target beyond MaxTargetsPerTenant.
var ErrTooManyTargets = errors.New("too many notification targets")

// CreateTarget stores a target. A job target's job must be the tenant's
// (ErrNotFound otherwise). The tenant's row is locked, so two creates
// cannot both pass the limit: the count is a statement of its own after
// the lock, as checkJobQuota's. Under READ COMMITTED a count in the
// locking statement reads that statement's snapshot, taken before it
// waited for the lock, and misses the target the create it waited for
// inserted.
func (s *Store) CreateTarget(ctx context.Context, t NotificationTarget) (NotificationTarget, error) {
	var out NotificationTarget
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT true FROM tenants WHERE id = $1 FOR UPDATE`, t.TenantID).Scan(&locked); err != nil {
			return notFound(err, "create notification target: tenant")
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM notification_targets WHERE tenant_id = $1`, t.TenantID).Scan(&n); err != nil {
			return fmt.Errorf("create notification target: count: %w", err)
		}
		if n >= MaxTargetsPerTenant {
			return fmt.Errorf("%w: at most %d per tenant", ErrTooManyTargets, MaxTargetsPerTenant)
		}
		if t.CronJobID != nil {
			var ok bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cron_jobs WHERE id = $1 AND tenant_id = $2)`,
				*t.CronJobID, t.TenantID).Scan(&ok); err != nil {
				return fmt.Errorf("create notification target: job: %w", err)
			}
			if !ok {
				return fmt.Errorf("create notification target: job: %w", ErrNotFound)
			}
		}
		var err error
		out, err = scanTarget(tx.QueryRow(ctx, `
			INSERT INTO notification_targets (tenant_id, cron_job_id, kind, url, secret, address, events)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+targetColumns,
			t.TenantID, t.CronJobID, t.Kind, t.URL, t.Secret, t.Address, t.Events))
		return wrap(err, "create notification target")
	})
	return out, err
}

// ListTargets returns a tenant's targets, oldest first.
func (s *Store) ListTargets(ctx context.Context, tenantID string) ([]NotificationTarget, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+targetColumns+` FROM notification_targets
		WHERE tenant_id = $1 ORDER BY created_at, id`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("list notification targets: %w", err)
	}
	out := []NotificationTarget{}
	for rows.Next() {
		t, err := scanTarget(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("list notification targets: %w", err)
		}
		out = append(out, t)
	}
	return out, wrap(rows.Err(), "list notification targets")
}

// GetTarget returns a target by id.
func (s *Store) GetTarget(ctx context.Context, id string) (NotificationTarget, error) {
	t, err := scanTarget(s.pool.QueryRow(ctx, `SELECT `+targetColumns+` FROM notification_targets WHERE id = $1`, id))
	return t, notFound(err, "get notification target")
}

// DeleteTarget removes a target and, by cascade, its deliveries: nothing
// pending for it is sent any more (one in flight may still arrive).
func (s *Store) DeleteTarget(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM notification_targets WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete notification target: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete notification target: %w", ErrNotFound)
	}
	return nil
}

// emitEvents writes, inside the transaction that recorded the runs, one
// event per (run, kind) that some target of the run's tenant subscribes
// to, and a pending delivery per matching target: the same tenant, a
// tenant-wide target or the job's own, subscribed to the kind. One statement, whatever the number of targets; an event already
// written for the run key and kind is not written again. The payload is
// read from the run and the job as the transaction sees them (the counter
// after the recount).
func emitEvents(ctx context.Context, tx execer, runIDs []int64, kinds []string) error {
	return emitEventsAt(ctx, tx, runIDs, nil, kinds)
}

// emitEventsAt is emitEvents with each run's slot (scheduled_at, with the
// id its primary key) when the caller knows it, so that each run is read
// from its month's index instead of every month's; nil slots: by id alone.
func emitEventsAt(ctx context.Context, tx execer, runIDs []int64, slots []time.Time, kinds []string) error {
	if len(runIDs) == 0 {
		return nil
	}
	run := `r.id = u.run_id`
	if slots != nil {
		run += ` AND r.scheduled_at = u.scheduled_at`
	}
	_, err := tx.Exec(ctx, `
		WITH u AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::timestamptz[]) AS u(run_id, kind, scheduled_at)),
		ev AS (
			INSERT INTO notification_events (tenant_id, cron_job_id, kind, run_id, run_key, payload)
			SELECT j.tenant_id, j.id, u.kind, r.id, r.run_key, jsonb_build_object(
			       'job_name', j.name, 'schedule', j.schedule, 'timezone', j.timezone, 'job_status', j.status,
			       'consecutive_failures', j.consecutive_failures, 'max_failures', j.max_failures,
			       'run_id', r.id, 'run_key', r.run_key, 'scheduled_at', r.scheduled_at, 'result', r.result,
			       'exit_code', r.exit_code, 'failure_reason', r.failure_reason, 'trigger', r.trigger,
			       'started_at', r.started_at, 'finished_at', r.finished_at, 'timeout_seconds', j.timeout_seconds)
			FROM u JOIN cron_job_runs r ON `+run+` JOIN cron_jobs j ON j.id = r.cron_job_id
			WHERE EXISTS (SELECT 1 FROM notification_targets t WHERE t.tenant_id = j.tenant_id
			              AND (t.cron_job_id IS NULL OR t.cron_job_id = j.id) AND u.kind = ANY(t.events))
			ON CONFLICT (cron_job_id, kind, run_key) DO NOTHING
			RETURNING id, tenant_id, cron_job_id, kind)
		INSERT INTO notification_deliveries (event_id, target_id, tenant_id, channel)
		SELECT ev.id, t.id, ev.tenant_id, t.kind FROM ev JOIN notification_targets t
		  ON t.tenant_id = ev.tenant_id AND (t.cron_job_id IS NULL OR t.cron_job_id = ev.cron_job_id) AND ev.kind = ANY(t.events)`,
		runIDs, kinds, slots)
	return wrap(err, "notification events")
}

// notifyOutcome emits the events of one recorded outcome (notify.EventsFor)
// in its transaction; before is the job before the recount.
func notifyOutcome(ctx context.Context, tx execer, before CronJob, res OutcomeResult, runID int64, at time.Time, result wire.Result) error {
	kinds := notify.EventsFor(notify.Recorded{
		Result: result, Failure: IsFailure(result),
		PrevFailures: before.ConsecutiveFailures, Failures: res.Job.ConsecutiveFailures,
		MaxFailures: res.Job.MaxFailures, AutoDisabled: res.AutoDisabled, Retried: res.Retry != "",
	})
	if len(kinds) == 0 {
		return nil
	}
	ids := make([]int64, len(kinds))
	slots := make([]time.Time, len(kinds))
	names := make([]string, len(kinds))
	for i, k := range kinds {
		ids[i], slots[i], names[i] = runID, at, string(k)
	}
	return emitEventsAt(ctx, tx, ids, slots, names)
}

// Delivery is a claimed delivery with what its attempt needs.
type Delivery struct {
	ID        int64
	Lease     int64 // the claim's token: RecordAttempt needs it
	Attempts  int   // attempts before this one
	State     string
	EventID   int64
	Kind      string
	TenantID  string // empty for an operator event
	CronJobID string // empty for an operator event
	ShardID   string // an operator event's shard
	TargetID  string
	RunKey    string
	Payload   json.RawMessage
	CreatedAt time.Time // the event's
	// ClaimedAt is the database's clock at the claim: ClaimedAt -
	// CreatedAt is the event's age on one clock, whatever the worker's.
	ClaimedAt time.Time
	Channel   string
	URL       string
	Secret    string
	Address   string
}

const claimedColumns = `d.id, d.lease, d.attempts, d.state, e.id, e.kind, coalesce(e.tenant_id::text, ''), coalesce(e.cron_job_id::text, ''),
	coalesce(e.shard_id::text, ''), d.target_id::text,
	e.run_key, e.payload, e.created_at, now(), d.channel, t.url, t.secret, t.address`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	err := row.Scan(&d.ID, &d.Lease, &d.Attempts, &d.State, &d.EventID, &d.Kind, &d.TenantID, &d.CronJobID, &d.ShardID, &d.TargetID,
		&d.RunKey, &d.Payload, &d.CreatedAt, &d.ClaimedAt, &d.Channel, &d.URL, &d.Secret, &d.Address)
	return d, err
}

func collectDeliveries(rows pgx.Rows, what string) ([]Delivery, error) {
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, d)
	}
	return out, wrap(rows.Err(), what)
}

// WebhookClaim bounds one claim of webhook deliveries.
type WebhookClaim struct {
	Limit int           // deliveries claimed at most (the worker's free slots)
	Lease time.Duration // how long other workers keep off them
	// PerTarget and PerTenant cap the deliveries one target and one
	// tenant may have in flight (leased, across all workers) after the
	// claim: a slow receiver then holds at most PerTarget of the pool,
	// never all of it. <= 0: no cap.
	PerTarget, PerTenant int
}

// ClaimWebhookDeliveries leases up to c.Limit due webhook deliveries for
// c.Lease: their next_attempt_at and leased_until move to the lease's
// end and their lease token is incremented, so another worker (another
// replica) takes them only if this one died mid-attempt, and then this
// one can no longer record them. Due deliveries are ranked oldest first
// per target and per tenant; one whose rank plus what its target (or
// tenant) already has in flight passes the cap waits. SKIP LOCKED passes
// over rows being claimed; the locked row's condition is re-checked, so a
// row claimed since our snapshot is passed over too.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, c WebhookClaim) ([]Delivery, error) {
	if c.Limit <= 0 {
		return nil, nil
	}
	perTarget, perTenant := capOrMax(c.PerTarget), capOrMax(c.PerTenant)
	rows, err := s.pool.Query(ctx, `
		WITH inflight AS (
			SELECT target_id, tenant_id FROM notification_deliveries
			WHERE state = 'pending' AND channel = 'webhook' AND leased_until > now()),
		by_target AS (SELECT target_id, count(*) AS n FROM inflight GROUP BY target_id),
		-- The operator's deliveries (no tenant) are one group: the nil
		-- UUID stands for it, so the join below stays a hash join.
		by_tenant AS (SELECT coalesce(tenant_id, '00000000-0000-0000-0000-000000000000') AS tenant_id, count(*) AS n
		              FROM inflight GROUP BY 1),
		by_target_cap AS (
			SELECT r.* FROM (
				SELECT id, target_id, tenant_id, next_attempt_at,
				       row_number() OVER (PARTITION BY target_id ORDER BY next_attempt_at, id) AS rt
				FROM notification_deliveries
				WHERE state = 'pending' AND channel = 'webhook' AND next_attempt_at <= now()) r
			LEFT JOIN by_target bt ON bt.target_id = r.target_id
			WHERE r.rt + coalesce(bt.n, 0) <= $3),
		pick AS (
			SELECT r.id FROM (
				SELECT id, tenant_id, next_attempt_at,
				       row_number() OVER (PARTITION BY tenant_id ORDER BY next_attempt_at, id) AS rn
				FROM by_target_cap) r
			LEFT JOIN by_tenant bn ON bn.tenant_id = coalesce(r.tenant_id, '00000000-0000-0000-0000-000000000000')
			WHERE r.rn + coalesce(bn.n, 0) <= $4
			ORDER BY r.next_attempt_at, r.id LIMIT $1),
		due AS (
			SELECT id FROM notification_deliveries
			WHERE id IN (SELECT id FROM pick) AND state = 'pending' AND next_attempt_at <= now()
			FOR UPDATE SKIP LOCKED)
		UPDATE notification_deliveries d SET next_attempt_at = now() + $2::interval, leased_until = now() + $2::interval,
		       lease = d.lease + 1, updated_at = now()
		FROM due, notification_events e, notification_targets t
		WHERE d.id = due.id AND e.id = d.event_id AND t.id = d.target_id
		RETURNING `+claimedColumns, c.Limit, c.Lease, perTarget, perTenant)
	if err != nil {
		return nil, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	return collectDeliveries(rows, "claim webhook deliveries")
}

// capOrMax is a cap for SQL: <= 0 means none.
func capOrMax(n int) int {
	if n <= 0 {
		return math.MaxInt32
	}
	return n
}

// Attempt is the result of one delivery attempt.
type Attempt struct {
	State   string        // notify.State*: delivered, failed, or pending/held to retry
	RetryIn time.Duration // with pending or held
	Status  *int          // the HTTP status or SMTP code, nil: none
	Error   string
}

// Recorded is what RecordAttempt changed.
type Recorded struct {
	// Applied is false when the claim no longer held the delivery (its
	// lease ran out and another claim took it, or it was finished or
	// deleted meanwhile): nothing was changed.
	Applied bool
	// TargetFailures is the target's consecutive failed attempts after
	// this one (0 after a delivery), for the circuit breaker.
	TargetFailures int
}

// RecordAttempt stores an attempt of a claimed delivery, only if the
// claim (its lease token) still holds it, and counts the target's
// consecutive failures. A delivery whose target was deleted meanwhile is
// gone; that is no error.
func (s *Store) RecordAttempt(ctx context.Context, id, lease int64, a Attempt) (Recorded, error) {
	var r Recorded
	err := s.pool.QueryRow(ctx, `
		WITH d AS (
			UPDATE notification_deliveries SET state = $3, attempts = attempts + 1,
			       next_attempt_at = now() + $4::interval, leased_until = NULL, last_status = $5, last_error = $6,
			       delivered_at = CASE WHEN $3 = 'delivered' THEN now() END, updated_at = now()
			WHERE id = $1 AND lease = $2 AND state IN ('pending', 'held')
			RETURNING target_id),
		t AS (
			UPDATE notification_targets t SET failures = CASE WHEN $3 = 'delivered' THEN 0 ELSE t.failures + 1 END
			FROM d WHERE t.id = d.target_id
			RETURNING t.failures)
		SELECT EXISTS (SELECT 1 FROM d), coalesce((SELECT failures FROM t), 0)`,
		id, lease, a.State, a.RetryIn, a.Status, notify.Truncate(a.Error)).Scan(&r.Applied, &r.TargetFailures)
	return r, wrap(err, fmt.Sprintf("record delivery %d", id))
}

// DeferDelivery gives back a claimed delivery unattempted, due again in
// in (a disable_warning waiting for its output to reach the log store):
// no attempt is counted. Only the claim holding it may; false otherwise.
func (s *Store) DeferDelivery(ctx context.Context, id, lease int64, in time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE notification_deliveries SET next_attempt_at = now() + $3::interval,
		leased_until = NULL, updated_at = now()
		WHERE id = $1 AND lease = $2 AND state IN ('pending', 'held')`, id, lease, in)
	if err != nil {
		return false, fmt.Errorf("defer delivery %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// PauseTarget pushes the target's other due-soon pending deliveries (not
// those in flight) to now + pause: the circuit breaker opened, and there
// is no point hitting a receiver that keeps failing.
func (s *Store) PauseTarget(ctx context.Context, targetID string, pause time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE notification_deliveries SET next_attempt_at = now() + $2::interval, updated_at = now()
		WHERE target_id = $1 AND state = 'pending' AND next_attempt_at < now() + $2::interval
		AND (leased_until IS NULL OR leased_until <= now())`, targetID, pause)
	return wrap(err, "pause notification target")
}

// OperatorMailKey stands for the operator where the e-mail worker works
// per tenant: DueMailTenants lists it for operator e-mail, and it keys the
// operator's own rate window, so operator mail never spends a tenant's
// budget (gen_random_uuid never makes the nil UUID).
const OperatorMailKey = "00000000-0000-0000-0000-000000000000"

// DueMailTenants lists tenants with e-mail deliveries due
// (OperatorMailKey for the operator's).
func (s *Store) DueMailTenants(ctx context.Context, limit int) ([]string, error) {
	// The tenants whose mail has waited longest come first: with more
	// tenants due than one pass plans, an arbitrary pick could pass over
	// the same tenant's mail pass after pass.
	rows, err := s.pool.Query(ctx, `SELECT coalesce(tenant_id, $2::uuid)::text FROM notification_deliveries
		WHERE channel = 'email' AND state IN ('pending', 'held') AND next_attempt_at <= now()
		GROUP BY 1 ORDER BY min(next_attempt_at) LIMIT $1`, limit, OperatorMailKey)
	if err != nil {
		return nil, fmt.Errorf("due mail tenants: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// MailPlanner is mail.PlanTenant with the operator's limit and period
// bound.
type MailPlanner func(now time.Time, w mail.Window, due []mail.Due) mail.Plan

// MailClaim bounds what PlanTenantMail claims and how long it leases it.
type MailClaim struct {
	// Limit bounds the fresh (pending) deliveries claimed.
	Limit int
	// PerAddress bounds the held deliveries claimed per address: all of an
	// address's held backlog goes into one digest, up to this many (more
	// are counted, and the digest says "and N more").
	PerAddress int
	// Lease is how long the deliveries of a plan that sends mails are
	// leased: long enough for all of them, one after the other.
	Lease func(mails int) time.Duration
}

// MailBatch is a tenant's planned e-mail.
type MailBatch struct {
	Plan    mail.Plan
	Claimed []Delivery     // with the lease tokens of the sends
	More    map[string]int // address -> held deliveries beyond PerAddress, left for a later digest
}

// PlanTenantMail plans a tenant's due e-mails in one short transaction:
// it locks the tenant's rate window (so replicas plan a tenant one at a
// time), claims the due deliveries (SKIP LOCKED: every held one of an
// address up to c.PerAddress, and up to c.Limit fresh ones), asks plan,
// leases what it will send (Send and Digests) for c.Lease(mails), marks
// Hold held until HoldUntil and stores the window (its mails reserved:
// the caller gives back those that fail, RefundMail). The caller sends
// outside it and records each attempt with the leases in Claimed.
func (s *Store) PlanTenantMail(ctx context.Context, tenantID string, c MailClaim, plan MailPlanner) (MailBatch, error) {
	var out MailBatch
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var w mail.Window
		var now time.Time
		if err := tx.QueryRow(ctx, `
			INSERT INTO notification_mail_windows (tenant_id, start, sent) VALUES ($1, 'epoch', 0)
			ON CONFLICT (tenant_id) DO UPDATE SET tenant_id = EXCLUDED.tenant_id
			RETURNING start, sent, now()`, tenantID).Scan(&w.Start, &w.Sent, &now); err != nil {
			return fmt.Errorf("lock mail window: %w", err)
		}
		claimed, more, err := claimMail(ctx, tx, tenantID, c)
		if err != nil {
			return err
		}
		due := make([]mail.Due, len(claimed))
		for i, d := range claimed {
			due[i] = MailDue(d)
		}
		p := plan(now, w, due)
		leases, err := applyMailPlan(ctx, tx, tenantID, p, c.Lease(len(p.Send)+len(p.Digests)))
		if err != nil {
			return err
		}
		for i := range claimed {
			if l, ok := leases[claimed[i].ID]; ok {
				claimed[i].Lease = l
			}
		}
		out = MailBatch{Plan: p, Claimed: claimed, More: more}
		return nil
	})
	return out, err
}

// claimMail locks a tenant's due e-mail deliveries: every held one per
// address up to c.PerAddress (counting those beyond), and up to c.Limit
// pending ones; oldest first.
func claimMail(ctx context.Context, tx pgx.Tx, tenantID string, c MailClaim) ([]Delivery, map[string]int, error) {
	rows, err := tx.Query(ctx, `
		SELECT `+claimedColumns+` FROM notification_deliveries d
		JOIN notification_events e ON e.id = d.event_id JOIN notification_targets t ON t.id = d.target_id
		WHERE d.id IN (
			SELECT id FROM (
				SELECT d.id, row_number() OVER (PARTITION BY t.address ORDER BY d.id) AS rn
				FROM notification_deliveries d JOIN notification_targets t ON t.id = d.target_id
				WHERE coalesce(d.tenant_id, '00000000-0000-0000-0000-000000000000') = $1::uuid AND d.channel = 'email' AND d.state = 'held' AND d.next_attempt_at <= now()) h
			WHERE rn <= $2)
		ORDER BY d.id FOR UPDATE OF d SKIP LOCKED`, tenantID, c.PerAddress)
	if err != nil {
		return nil, nil, fmt.Errorf("claim held mail: %w", err)
	}
	held, err := collectDeliveries(rows, "claim held mail")
	if err != nil {
		return nil, nil, err
	}
	rows, err = tx.Query(ctx, `
		SELECT `+claimedColumns+` FROM notification_deliveries d
		JOIN notification_events e ON e.id = d.event_id JOIN notification_targets t ON t.id = d.target_id
		WHERE coalesce(d.tenant_id, '00000000-0000-0000-0000-000000000000') = $1::uuid AND d.channel = 'email' AND d.state = 'pending' AND d.next_attempt_at <= now()
		ORDER BY d.id LIMIT $2 FOR UPDATE OF d SKIP LOCKED`, tenantID, c.Limit)
	if err != nil {
		return nil, nil, fmt.Errorf("claim mail: %w", err)
	}
	fresh, err := collectDeliveries(rows, "claim mail")
	if err != nil {
		return nil, nil, err
	}
	more, err := heldBeyond(ctx, tx, tenantID, c.PerAddress)
	if err != nil {
		return nil, nil, err
	}
	all := append(held, fresh...)
	slices.SortFunc(all, func(a, b Delivery) int { return cmp.Compare(a.ID, b.ID) })
	return all, more, nil
}

// heldBeyond counts, per address, the due held deliveries past the
// first perAddress.
func heldBeyond(ctx context.Context, tx pgx.Tx, tenantID string, perAddress int) (map[string]int, error) {
	rows, err := tx.Query(ctx, `
		SELECT t.address, count(*) - $2 FROM notification_deliveries d JOIN notification_targets t ON t.id = d.target_id
		WHERE coalesce(d.tenant_id, '00000000-0000-0000-0000-000000000000') = $1::uuid AND d.channel = 'email' AND d.state = 'held' AND d.next_attempt_at <= now()
		GROUP BY t.address HAVING count(*) > $2`, tenantID, perAddress)
	if err != nil {
		return nil, fmt.Errorf("count held mail: %w", err)
	}
	defer rows.Close()
	more := map[string]int{}
	for rows.Next() {
		var addr string
		var n int
		if err := rows.Scan(&addr, &n); err != nil {
			return nil, fmt.Errorf("count held mail: %w", err)
		}
		more[addr] = n
	}
	return more, wrap(rows.Err(), "count held mail")
}

// applyMailPlan leases what a plan sends (a new lease token each),
// holds what it holds and stores the window; it returns the tokens.
func applyMailPlan(ctx context.Context, tx pgx.Tx, tenantID string, p mail.Plan, lease time.Duration) (map[int64]int64, error) {
	var send, hold []int64
	for _, d := range p.Send {
		send = append(send, d.DeliveryID)
	}
	for _, ds := range p.Digests {
		for _, d := range ds {
			send = append(send, d.DeliveryID)
		}
	}
	for _, d := range p.Hold {
		hold = append(hold, d.DeliveryID)
	}
	rows, err := tx.Query(ctx, `UPDATE notification_deliveries SET next_attempt_at = now() + $2::interval,
		leased_until = now() + $2::interval, lease = lease + 1, updated_at = now()
		WHERE id = ANY($1) RETURNING id, lease`, send, lease)
	if err != nil {
		return nil, fmt.Errorf("lease mail: %w", err)
	}
	leases := map[int64]int64{}
	var id, l int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &l}, func() error { leases[id] = l; return nil }); err != nil {
		return nil, fmt.Errorf("lease mail: %w", err)
	}
	// Holding is a claim too: the new token stops a worker whose lease on
	// these rows ran out from recording over the hold.
	if _, err := tx.Exec(ctx, `UPDATE notification_deliveries SET state = 'held', next_attempt_at = $2, lease = lease + 1,
		       leased_until = NULL, updated_at = now()
		WHERE id = ANY($1)`, hold, p.HoldUntil); err != nil {
		return nil, fmt.Errorf("hold mail: %w", err)
	}
	_, err = tx.Exec(ctx, `UPDATE notification_mail_windows SET start = $2, sent = $3 WHERE tenant_id = $1`,
		tenantID, p.Window.Start, p.Window.Sent)
	return leases, wrap(err, "store mail window")
}

// RefundMail gives back one mail of a tenant's window that was reserved
// by a plan but not sent (the relay failed): the budget counts mails
// sent. A window that has rolled over since is left alone.
func (s *Store) RefundMail(ctx context.Context, tenantID string, windowStart time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE notification_mail_windows SET sent = sent - 1
		WHERE tenant_id = $1 AND start = $2 AND sent > 0`, tenantID, windowStart)
	return wrap(err, "refund mail window")
}

// MailDue turns a claimed e-mail delivery into the mail package's input.
func MailDue(d Delivery) mail.Due {
	var p struct {
		JobName             string `json:"job_name"`
		Schedule            string `json:"schedule"`
		Result              string `json:"result"`
		FailureReason       string `json:"failure_reason"`
		OutputTail          string `json:"output_tail"`
		ConsecutiveFailures int    `json:"consecutive_failures"`
		MaxFailures         int    `json:"max_failures"`
		// an operator event's (emitOperator)
		ShardName string            `json:"shard_name"`
		Count     int               `json:"count"`
		Examples  []json.RawMessage `json:"examples"`
	}
	_ = json.Unmarshal(d.Payload, &p) // written by emitEvents or emitOperator: always this shape
	examples := make([]string, len(p.Examples))
	for i, x := range p.Examples {
		examples[i] = string(x)
	}
	return mail.Due{DeliveryID: d.ID, To: d.Address, Held: d.State == notify.StateHeld, Event: mail.Event{
		ID: d.EventID, Kind: d.Kind, TenantID: d.TenantID, CronJobID: d.CronJobID, JobName: p.JobName,
		Schedule: p.Schedule, RunKey: d.RunKey, Result: p.Result, FailureReason: p.FailureReason,
		OutputTail: p.OutputTail, At: d.CreatedAt, ConsecutiveFailures: p.ConsecutiveFailures, MaxFailures: p.MaxFailures,
		ShardID: d.ShardID, ShardName: p.ShardName, Count: p.Count, Examples: examples,
	}}
}

// DeliveryView is a delivery as the API lists it.
type DeliveryView struct {
	ID            int64      `json:"id"`
	EventID       int64      `json:"event_id"`
	Kind          string     `json:"kind"`
	CronJobID     string     `json:"cron_job_id,omitempty"` // empty for an operator event
	ShardID       string     `json:"shard_id,omitempty"`    // an operator event's shard
	JobName       string     `json:"job_name"`
	RunKey        string     `json:"run_key"`
	State         string     `json:"state"`
	Attempts      int        `json:"attempts"`
	LastError     string     `json:"last_error"`
	LastStatus    *int       `json:"last_status"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DeliveredAt   *time.Time `json:"delivered_at"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
}

// ListDeliveries returns a target's deliveries, newest first, those with
// an id below before (0: from the newest).
func (s *Store) ListDeliveries(ctx context.Context, targetID string, before int64, limit int) ([]DeliveryView, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT d.id, e.id, e.kind, coalesce(e.cron_job_id::text, ''), coalesce(e.shard_id::text, ''),
		       coalesce(e.payload->>'job_name', ''), e.run_key, d.state, d.attempts,
		       d.last_error, d.last_status,
		       CASE WHEN d.state IN ('pending', 'held') THEN d.next_attempt_at END, d.delivered_at, d.created_at, d.updated_at
		FROM notification_deliveries d JOIN notification_events e ON e.id = d.event_id
		WHERE d.target_id = $1 AND ($2::bigint = 0 OR d.id < $2)
		ORDER BY d.id DESC LIMIT $3`, targetID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DeliveryView])
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	if out == nil {
		out = []DeliveryView{}
	}
	return out, nil
}

// PendingDeliveries counts deliveries not yet delivered or failed (the
// notification outbox's depth, read at scrape).
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM notification_deliveries WHERE state IN ('pending', 'held')`).Scan(&n)
	return n, wrap(err, "pending deliveries")
}

// PruneNotifications deletes delivered and failed deliveries last touched
// before cutoff, then events older than cutoff that have no delivery
// left, in batches (deleteBatched).
func (c Chores) PruneNotifications(ctx context.Context, cutoff time.Time) (int64, error) {
	n, err := c.deleteBatched(ctx, `DELETE FROM notification_deliveries WHERE id IN
		(SELECT id FROM notification_deliveries WHERE state IN ('delivered', 'failed') AND updated_at < $1 LIMIT 5000)`, cutoff)
	if err != nil {
		return n, fmt.Errorf("prune notification deliveries: %w", err)
	}
	m, err := c.deleteBatched(ctx, `DELETE FROM notification_events WHERE id IN
		(SELECT e.id FROM notification_events e WHERE e.created_at < $1
		 AND NOT EXISTS (SELECT 1 FROM notification_deliveries d WHERE d.event_id = e.id) LIMIT 5000)`, cutoff)
	if err != nil {
		return n + m, fmt.Errorf("prune notification events: %w", err)
	}
	return n + m, nil
}

// PruneNotifications is Chores.PruneNotifications on the store's pool.
func (s *Store) PruneNotifications(ctx context.Context, cutoff time.Time) (int64, error) {
	return Chores{s.pool}.PruneNotifications(ctx, cutoff)
}
