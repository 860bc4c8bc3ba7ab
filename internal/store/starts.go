package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// RunningRun is a run a node reported started and no outcome (nor the
// sweeper's lost record) has ended yet.
type RunningRun struct {
	RunKey       string       `json:"run_key"`
	CronJobID    string       `json:"cron_job_id"`
	NodeID       *string      `json:"node_id"`
	ScheduledAt  time.Time    `json:"scheduled_at"`
	StartedAt    time.Time    `json:"started_at"`
	InvocationID string       `json:"invocation_id"`
	Result       string       `json:"result"` // "running"
	Trigger      wire.Trigger `json:"trigger"`
	Attempt      int          `json:"attempt"`
}

// ResultRunning is the result a run in progress shows; it is never stored
// as a run's result.
const ResultRunning = "running"

// placeholderResults are records a node's real result replaces (a skip,
// another node's platform error, the sweeper's lost): a run with one may
// still be running on the node that runs the slot.
const placeholderResults = `('overlap_skipped', 'platform_error', 'lost')`

// RecordStart notes that node runs a run of job jobID. The job must be on
// the node's shard (as for outcomes). A node holds one start per job (a
// unit runs one activation at a time): a new run replaces the node's
// earlier one. A run that already has a real record changes nothing, nor
// does one whose activation already reported its end (its own platform
// error, endStart: the start came late). It reports whether the start was
// noted (new or replacing another run).
func (s *Store) RecordStart(ctx context.Context, node Node, jobID string, st wire.RunStart) (bool, error) {
	// The run's record is looked up by its key and the key's slot, if it
	// names one (runKeyWhere: one month's index).
	recorded, keyArgs := runKeyWhere("r.", st.RunKey, 9)
	args := append([]any{st.RunKey, jobID, node.ID, st.ScheduledAt, st.StartedAt, st.InvocationID, node.ShardID, string(st.Trigger)},
		keyArgs...)
	tag, err := s.pool.Exec(ctx, `
		INSERT INTO cron_job_run_starts (cron_job_id, node_id, run_key, scheduled_at, started_at, invocation_id, trigger)
		SELECT j.id, $3, $1, $4, $5, $6, $8 FROM cron_jobs j
		WHERE j.id = $2 AND j.tenant_id IN (SELECT id FROM tenants WHERE shard_id = $7)
		  AND NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE `+recorded+`
		                  AND (r.result NOT IN `+placeholderResults+` OR ($6 <> '' AND r.invocation_id = $6)))
		ON CONFLICT (cron_job_id, node_id) DO UPDATE
		SET run_key = EXCLUDED.run_key, scheduled_at = EXCLUDED.scheduled_at, started_at = EXCLUDED.started_at,
		    invocation_id = EXCLUDED.invocation_id, trigger = EXCLUDED.trigger, received_at = now()
		WHERE cron_job_run_starts.run_key <> EXCLUDED.run_key`, args...)
	if err != nil {
		return false, fmt.Errorf("record start: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// runningWhere is the condition of a start (s, of job j) that is still a
// run in progress: no real record has ended it, and it was reported
// within the job's timeout and the cancel reach (systemd stops a run at
// its timeout; a start of a node that died, or of a run the sweeper never
// visits, must not read as running for days).
//
// The record is looked up by the start's key at the start's slot (the
// endpoint holds a start to its key's slot), and a manual key's, which
// names no slot, in every month as well. Two conditions, not one with
// "manual or the slot": a condition that mixes the run's columns with
// the start's cannot bound the index probe by the slot, and reads every
// scheduled run of the job in every month for each start (seconds for a
// list of jobs that run every minute). The second is evaluated only for a
// manual key (OR stops at its first true operand), and names the manual
// identity with constants: compared with expressions of the start, a
// month that holds no manual run looks to the planner as if the job's id
// were the whole key, and the job's index is read instead (seconds again,
// in the third review's history of 150 days).
var runningWhere = `NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE ` + runIdentity("r.", "s.run_key", "s.cron_job_id") +
	` AND r.scheduled_at = s.scheduled_at AND r.result NOT IN ` + placeholderResults + `)
	AND (run_key_trigger(s.run_key) <> 'manual' OR NOT EXISTS (SELECT 1 FROM cron_job_runs r
		WHERE r.cron_job_id = s.cron_job_id AND r.key_trigger = 'manual' AND r.key_request = run_key_request(s.run_key)
		  AND r.attempt = 1 AND r.result NOT IN ` + placeholderResults + `))
	AND s.received_at > now() - make_interval(secs => j.timeout_seconds) - interval '15 minutes'`

// runningRunsSQL and runningSinceSQL are RunningRuns' and RunningSince's
// statements.
var (
	runningRunsSQL = `SELECT s.run_key, s.cron_job_id, s.node_id, s.scheduled_at, s.started_at, s.invocation_id, s.trigger
		FROM cron_job_run_starts s JOIN cron_jobs j ON j.id = s.cron_job_id
		WHERE s.cron_job_id = $1 AND ` + runningWhere + ` ORDER BY s.scheduled_at DESC, s.run_key`
	runningSinceSQL = `SELECT s.cron_job_id::text, min(s.started_at) FROM cron_job_run_starts s
		JOIN cron_jobs j ON j.id = s.cron_job_id
		WHERE s.cron_job_id = ANY($1::uuid[]) AND ` + runningWhere + ` GROUP BY 1`
)

// RunningRuns are a job's runs in progress, newest slot first (at most
// one per node).
func (s *Store) RunningRuns(ctx context.Context, jobID string) ([]RunningRun, error) {
	rows, err := s.pool.Query(ctx, runningRunsSQL, jobID)
	if err != nil {
		return nil, fmt.Errorf("running runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunningRun, error) {
		var rr RunningRun
		var reported string
		err := r.Scan(&rr.RunKey, &rr.CronJobID, &rr.NodeID, &rr.ScheduledAt, &rr.StartedAt, &rr.InvocationID, &reported)
		rr.Result = ResultRunning
		rr.Trigger, rr.Attempt = startedTrigger(rr.RunKey, wire.Trigger(reported))
		return rr, err
	})
	if err != nil {
		return nil, fmt.Errorf("running runs: %w", err)
	}
	return out, nil
}

// RunningSince is, per job of ids, when its oldest run in progress
// started; jobs with none are absent.
func (s *Store) RunningSince(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, runningSinceSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("running since: %w", err)
	}
	var id string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error { out[id] = at; return nil })
	if err != nil {
		return nil, fmt.Errorf("running since: %w", err)
	}
	return out, nil
}

// IsPlaceholder reports whether a record is one a node's real result
// replaces (decideRecord): a run under it may still be running.
func IsPlaceholder(r wire.Result) bool { return r.IsPlaceholder() }

// activationStart matches the start that one activation (node, systemd
// invocation) reported for a run: $1 run key, $2 node, $3 invocation.
const activationStart = `run_key = $1 AND node_id = $2 AND invocation_id = $3`

// endStart deletes a run's start once its record is written (in the
// recording transaction). A placeholder record ends only the start of the
// very activation that reports it (same node, same systemd invocation):
// that node's run has ended, e.g. stopped by the node's shutdown and
// reported as platform_error. Any other placeholder (another node's skip,
// or its word that the holder stopped heart-beating) leaves the start of
// the node that runs the slot, whose real result is still to come.
func endStart(ctx context.Context, tx execer, nodeID string, o Outcome) error {
	if !IsPlaceholder(o.Result) {
		if _, err := tx.Exec(ctx, `DELETE FROM cron_job_run_starts WHERE run_key = $1`, o.RunKey); err != nil {
			return fmt.Errorf("end run start: %w", err)
		}
		return nil
	}
	if o.InvocationID == "" {
		return nil // an older node's report: nothing ties it to a start
	}
	if _, err := tx.Exec(ctx, `DELETE FROM cron_job_run_starts WHERE `+activationStart,
		o.RunKey, nodeID, o.InvocationID); err != nil {
		return fmt.Errorf("end run start: %w", err)
	}
	return nil
}

// stoppedOnItsNode reports whether o is the node's shutdown stopping a run
// (o.Shutdown, which the hook sets on PID 1's word and no tenant record
// can) from the very activation that reported the run's start (same
// node, same systemd invocation): the run was under way there, rather
// than another node's word on a slot it did not run. Such an attempt is
// retried as a failure would be (decideRetry); it still counts as no
// failure. Any other platform error, which a tenant's command can provoke
// by rewriting its record and killing its runner, is not retried.
func stoppedOnItsNode(ctx context.Context, tx pgx.Tx, nodeID string, o Outcome) (bool, error) {
	if o.Result != wire.ResultPlatformError || !o.Shutdown || o.InvocationID == "" {
		return false, nil
	}
	var found bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cron_job_run_starts WHERE `+activationStart+`)`,
		o.RunKey, nodeID, o.InvocationID).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("outcome: read the run's start: %w", err)
	}
	return found, nil
}

// PruneStarts deletes starts reported before cutoff: past its job's
// timeout a start no longer reads as running (runningWhere); this only
// keeps the table small.
func (c Chores) PruneStarts(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := c.db.Exec(ctx, `DELETE FROM cron_job_run_starts WHERE received_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("prune run starts: %w", err)
	}
	return tag.RowsAffected(), nil
}

// startedTrigger is the trigger and attempt a run in progress shows: the
// trigger its node reported where the key allows it (a catch-up's
// scheduled key), else the key's; the key's attempt (scheduled, 1 for a
// key that does not parse: it was checked when the start was noted).
func startedTrigger(key string, reported wire.Trigger) (wire.Trigger, int) {
	k, err := runkey.Parse(key)
	if err != nil {
		return wire.TriggerScheduled, 1
	}
	if t, ok := wire.RecordedTrigger(k.Trigger, reported); ok {
		return t, k.AttemptNumber()
	}
	return k.Trigger, k.AttemptNumber()
}

// WantsRunning reports whether a run in progress of trigger and slot
// passes the query's filters (result, trigger, range).
func (q RunQuery) WantsRunning(trigger wire.Trigger, slot time.Time) bool {
	switch {
	case len(q.Results) > 0 && !slices.Contains(q.Results, wire.Result(ResultRunning)):
		return false
	case len(q.Triggers) > 0 && !slices.Contains(q.Triggers, trigger):
		return false
	case q.From != nil && slot.Before(*q.From):
		return false
	case q.To != nil && !slot.Before(*q.To):
		return false
	}
	return true
}

// OnlyRunning reports whether the query asks for runs in progress alone,
// which no stored record is.
func (q RunQuery) OnlyRunning() bool {
	return len(q.Results) == 1 && q.Results[0] == wire.Result(ResultRunning)
}
