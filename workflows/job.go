package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// Activity receivers: nil pointers whose method values name activities,
// as in Temporal's samples.
var (
	core *CoreActivities
	node *NodeActivities
)

// maxBatches bounds one run's history; the workflow continues as new.
const maxBatches = 100

// dedupChange is the GetVersion change id of skipping redelivered outbox
// tasks: runs started before it replay without the check.
const dedupChange = "skip-handled-task-ids"

// retryChange is the GetVersion change id of asking a node that timed out
// once more before the verdict (or the delete's end): runs started before
// it replay with a single round.
const retryChange = "retry-timed-out-nodes"

// cancelChange is the GetVersion change id of cancels: a run that started
// before it provisions on every batch, a cancel included (it does not
// stop the run: a core that old did not know cancels), so a replica of
// either version replays the other's history.
const cancelChange = "cancel-runs"

// nodeRounds is how many times provisioning asks a node that timed out
// (no answer within the node timeout: its worker never took the task, or
// took it and did not finish, as on a node busy with every change that
// waited out a Temporal outage). A node that answered with an error is
// not asked again.
const nodeRounds = 2

// JobWorkflow applies a cron job's changes to every node of its shard, one
// batch after another. Changes arrive as signals (signal-with-start from
// the core's outbox dispatcher); each batch loads the job's current state,
// so the nodes always end with the newest version, whatever order changes
// raced in. It completes after IdleTimeout without changes.
//
// The dispatcher delivers at least once (a crash between Temporal
// accepting a signal and the outbox row being marked re-sends it), and
// sends one job's tasks in id order, so a task id at or below the highest
// one handled is a redelivery and is ignored; that id travels through
// continue-as-new in JobInput.LastTaskID.
func JobWorkflow(ctx workflow.Context, in JobInput) error {
	in = in.withDefaults()
	dedup := workflow.GetVersion(ctx, dedupChange, workflow.DefaultVersion, 1) >= 1
	rounds := 1
	if workflow.GetVersion(ctx, retryChange, workflow.DefaultVersion, 1) >= 1 {
		rounds = nodeRounds
	}
	cancels := workflow.GetVersion(ctx, cancelChange, workflow.DefaultVersion, 1) >= 1
	changes := workflow.GetSignalChannel(ctx, SignalChange)
	cutShort := false // the last provisioning left a node unasked for newer changes
	for batch := 0; ; batch++ {
		b, ok := receiveBatch(ctx, changes, &in, dedup)
		if !ok {
			return nil // idle: the next change starts a new run
		}
		if !cancels {
			b.provision, b.cancels = true, nil
		}
		// A batch of cancels alone provisions nothing, so a node that is
		// down does not hold a stop up for the node timeout, unless the
		// last provisioning was cut short for it.
		if b.provision || cutShort {
			var err error
			if cutShort, err = provision(ctx, in, rounds, changes); err != nil {
				return err
			}
		}
		first, after := b.cancelsAround(in.JobID)
		cancelRuns(ctx, in, first) // before the run-now, which may wait for the run they stop
		if b.runNow != "" {
			runOnce(ctx, in, b.runNow, "")
		}
		for _, r := range b.keyed {
			runKeyed(ctx, in, r)
		}
		cancelRuns(ctx, in, after) // a cancel of the run-now stops it once it runs
		if batch >= in.MaxBatches && changes.Len() == 0 {
			return workflow.NewContinueAsNewError(ctx, JobWorkflow, in)
		}
	}
}

// batch is what a run of queued changes asks for: runNow is the request
// id of the newest run-now among them, if any; cancels the run keys to
// stop, in order.
type batch struct {
	runNow string
	// keyed are the backfill and retry requests among them, in order:
	// each is a run of its own (another slot or attempt, or the same slot
	// backfilled after another fix), so they are never coalesced.
	keyed     []keyedRun
	cancels   []string
	provision bool // a change other than a cancel: the nodes get the job's newest state
}

// add takes in one change's request.
func (b *batch) add(c Change) {
	if c.Action == wire.ActionRunNow && c.RunKey != "" {
		b.keyed = append(b.keyed, keyedOf(c))
		b.provision = true
		return
	}
	b.runNow = runNowRequest(c, b.runNow)
	if c.Action != wire.ActionCancel {
		b.provision = true
	} else if c.RunKey != "" && !slices.Contains(b.cancels, c.RunKey) {
		b.cancels = append(b.cancels, c.RunKey)
	}
}

// cancelsAround splits the batch's cancels into those of other runs, which
// go first, and the one of the batch's own run-now, which can only stop
// it once it has started.
func (b batch) cancelsAround(jobID string) (first, after []string) {
	var own []string
	if b.runNow != "" {
		own = append(own, runkey.Manual(jobID, b.runNow))
	}
	for _, r := range b.keyed {
		own = append(own, r.Req.RunKey)
	}
	for _, k := range b.cancels {
		if slices.Contains(own, k) {
			after = append(after, k)
		} else {
			first = append(first, k)
		}
	}
	return first, after
}

// receiveBatch waits up to IdleTimeout for a new change, then takes what
// is already queued with it (coalescing). Redelivered tasks are dropped
// and do not end the wait; ok is false when the workflow went idle.
func receiveBatch(ctx workflow.Context, changes workflow.ReceiveChannel, in *JobInput, dedup bool) (b batch, ok bool) {
	var c Change
	for {
		if got, _ := changes.ReceiveWithTimeout(ctx, in.IdleTimeout, &c); !got {
			return batch{}, false
		}
		if !dedup || in.accept(c) {
			break
		}
		workflow.GetLogger(ctx).Info("ignoring redelivered change", "task_id", c.TaskID)
	}
	b.add(c)
	for changes.ReceiveAsync(&c) { // coalesce what is already queued
		if dedup && !in.accept(c) {
			continue
		}
		b.add(c)
	}
	return b, true
}

// accept reports whether c is new, and remembers its task id. A change
// without a task id (not from the outbox) is always new. So is a retry:
// its task waits in the outbox for its delay while the job's later tasks
// go out (store.ClaimTasks), so it may come after higher task ids; a
// redelivered retry asks the nodes again, where its request id, claimed
// by the runner that ran it, runs nothing a second time.
func (in *JobInput) accept(c Change) bool {
	if c.TaskID == 0 {
		return true
	}
	if isRetry(c) {
		in.LastTaskID = max(in.LastTaskID, c.TaskID)
		return true
	}
	if c.TaskID <= in.LastTaskID {
		return false
	}
	in.LastTaskID = c.TaskID
	return true
}

func (in JobInput) withDefaults() JobInput {
	if in.NodeTimeout <= 0 {
		in.NodeTimeout = 2 * time.Minute
	}
	if in.IdleTimeout <= 0 {
		in.IdleTimeout = 5 * time.Minute
	}
	if in.MaxBatches <= 0 {
		in.MaxBatches = maxBatches
	}
	return in
}

func coreCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           CoreTaskQueue,
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
	})
}

// nodeCtx routes an activity to one node, bounded by timeout in total so
// a node that is down fails instead of blocking the job forever. No
// heartbeat timeout: ApplyJobs and RemoveUnits complete asynchronously
// (NodeActivities.completeLater) and never heartbeat.
func nodeCtx(ctx workflow.Context, nodeID string, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              NodeTaskQueue(nodeID),
		ScheduleToCloseTimeout: timeout,
		StartToCloseTimeout:    min(timeout, 60*time.Second),
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second},
	})
}

// RunNowHeartbeat is the heartbeat timeout of the RunNow activity: it
// waits up to wire.RunNowTTL on the node for a run of the job under way
// there to end, heart-beating, so a node agent that died mid-wait is
// noticed in seconds, not at the end of the wait.
const RunNowHeartbeat = 30 * time.Second

// Bounds of the RunNow activity on one node, so a node that is down or
// fails keeps the job's workflow (which applies no other change of the job
// meanwhile) for a bounded time before the next node is asked.
const (
	// runNowStartWithin bounds how long RunNow waits for the node's worker
	// to pick it up (a node that is down, or all its activity slots busy):
	// at most this, and at most the node timeout given.
	runNowStartWithin = time.Minute
	// runNowAttempts bounds the tries on one node of an error that may
	// pass (D-Bus restarting); an error that cannot pass is final at once
	// (wire.ErrRunNowNotHere, wire.ErrRunNowNotTaken).
	runNowAttempts = 3
)

// runNowOptions is nodeCtx's options for RunNow: the node may wait up to
// the request's TTL before a start takes it (heart-beating meanwhile), but
// it must pick the task up within runNowStartWithin, and an error is tried
// at most runNowAttempts times.
func runNowOptions(nodeID string, timeout time.Duration) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		TaskQueue:              NodeTaskQueue(nodeID),
		ScheduleToStartTimeout: min(timeout, runNowStartWithin),
		ScheduleToCloseTimeout: timeout + wire.RunNowTTL,
		StartToCloseTimeout:    wire.RunNowTTL + time.Minute,
		HeartbeatTimeout:       RunNowHeartbeat,
		RetryPolicy:            &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: runNowAttempts},
	}
}

func runNowCtx(ctx workflow.Context, nodeID string, timeout time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, runNowOptions(nodeID, timeout))
}

// provision applies the job's current state on all its nodes in parallel
// and records the verdict: active or disabled once every node has it,
// failed (naming the nodes) otherwise, with how many nodes took it (the
// lost-run sweep starts only once one has; an active verdict no node took,
// on a shard without nodes, is stored failed). A deleted job's row goes once every
// node was asked; nodes that missed it drop the units when they converge.
//
// A node that timed out is asked again (up to rounds in all) before the
// verdict, unless a newer change is already queued (its batch asks every
// node anyway): after a Temporal outage every change that waited reaches
// each node at once, and one attempt lost or queued past the node timeout
// must not leave a live node on the old version with the job failed (or,
// for a delete, the row gone and the units running there).
func provision(ctx workflow.Context, in JobInput, rounds int, changes workflow.ReceiveChannel) (cutShort bool, err error) {
	var plan JobPlan
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.LoadJob, in.JobID).Get(ctx, &plan); err != nil {
		return false, fmt.Errorf("load job: %w", err)
	}
	if !plan.Exists {
		return false, nil
	}
	errs := make([]error, len(plan.Nodes))
	reps := make([]wire.NodeReport, len(plan.Nodes))
	ask := make([]bool, len(plan.Nodes))
	for i := range ask {
		ask[i] = true
	}
	for round := 1; ; round++ {
		futures := make([]workflow.Future, len(plan.Nodes))
		for i, n := range plan.Nodes {
			if !ask[i] {
				continue
			}
			nctx := nodeCtx(ctx, n.ID, in.NodeTimeout)
			if plan.Deleting {
				// The delete's version goes along: the node's tombstone refuses
				// every version up to it, which a late apply may still carry.
				futures[i] = workflow.ExecuteActivity(nctx, node.RemoveUnits, []string{plan.Job.UnitName()}, plan.Job.Version)
			} else {
				futures[i] = workflow.ExecuteActivity(nctx, node.ApplyJobs, []wire.Job{plan.Job})
			}
		}
		again := false
		for i, f := range futures {
			if f == nil {
				continue
			}
			reps[i] = wire.NodeReport{}
			errs[i] = f.Get(ctx, &reps[i])
			ask[i] = timedOut(errs[i])
			again = again || ask[i]
		}
		if !again || round >= rounds {
			break
		}
		if !plan.Deleting && changes.Len() > 0 {
			cutShort = true // the next batch provisions again, whatever it holds
			break
		}
	}
	var failed []string
	for i, rep := range reps {
		if err := errs[i]; err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", plan.Nodes[i].Name, rootCause(err)))
		} else if !plan.Deleting && len(rep.Stale) > 0 {
			// The node's tombstone refused the job: it removed the job at
			// this version or later. For a job being deleted the status
			// write below changes nothing (the delete moved the version
			// on); for a live one the job does not run there, and must not
			// be reported active (docs/semantics.md, "Orphans, snapshots
			// and tombstones").
			failed = append(failed, fmt.Sprintf("%s: refused by the node's tombstone (it removed the job at this version or later; a converge lifts a wrong one)", plan.Nodes[i].Name))
		}
	}
	if plan.Deleting {
		if len(failed) > 0 {
			workflow.GetLogger(ctx).Warn("units not removed from every node; converge removes them", "failed", failed)
		}
		return cutShort, workflow.ExecuteActivity(coreCtx(ctx), core.FinishDelete, in.JobID).Get(ctx, nil)
	}
	status, message := wire.StatusActive, ""
	if !plan.Job.Enabled {
		status = wire.StatusDisabled
	}
	if len(failed) > 0 {
		status, message = wire.StatusFailed, wire.NotProvisionedPrefix+strings.Join(failed, "; ")
	}
	took := len(plan.Nodes) - len(failed)
	return cutShort, workflow.ExecuteActivity(coreCtx(ctx), core.SetJobStatus, in.JobID, plan.Version, status, message, took).Get(ctx, nil)
}

// timedOut reports whether a node activity ended because its time ran
// out (the node gave no answer in time, or its retries ran out of time),
// not because the node refused the work: only such a node is asked again.
func timedOut(err error) bool {
	var timeout *temporal.TimeoutError
	var ae *temporal.ActivityError
	return errors.As(err, &timeout) || (errors.As(err, &ae) && ae.RetryState() == enumspb.RETRY_STATE_TIMEOUT)
}

// runNowRequest returns the request id of a run_now change (its outbox
// task id: the run's key), else the one seen before. Run-now requests
// queued together run once, as the newest.
func runNowRequest(c Change, prev string) string {
	if c.Action != wire.ActionRunNow {
		return prev
	}
	return strconv.FormatInt(c.TaskID, 10)
}

// runOnce starts one run on the first node that takes it; the request id
// and the shared run-now stamp make it one run even if two nodes, or a
// retried activity, started it. runKey is a backfill's key ("" for a
// run-now).
func runOnce(ctx workflow.Context, in JobInput, request, runKey string) {
	var plan JobPlan
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.LoadJob, in.JobID).Get(ctx, &plan); err != nil || !plan.Exists || plan.Deleting {
		return
	}
	runOn(ctx, in, plan, request, runKey)
}

// runOn asks plan's nodes in turn until one takes the request.
func runOn(ctx workflow.Context, in JobInput, plan JobPlan, request, runKey string) {
	for _, n := range plan.Nodes {
		err := workflow.ExecuteActivity(runNowCtx(ctx, n.ID, in.NodeTimeout/2), node.RunNow, wire.RunNowRequest{Unit: plan.Job.UnitName(), Request: request, RunKey: runKey}).Get(ctx, nil)
		if err == nil {
			return
		}
		workflow.GetLogger(ctx).Warn("run now failed on node, trying the next", "node", n.Name, "err", err)
	}
}

// keyedRun is a backfill or retry request: what a node is asked, and the
// job version it was queued at.
type keyedRun struct {
	Req     wire.RunNowRequest
	Version int64
	Retry   bool
}

// isRetry reports whether c is a retry's run-now task.
func isRetry(c Change) bool {
	k, err := runkey.Parse(c.RunKey)
	return c.Action == wire.ActionRunNow && err == nil && k.Trigger == wire.TriggerRetry
}

// keyedOf is the request of a run_now change with a run key: a backfill's
// request is its task id (the key names it), a retry's the id made of its
// slot and attempt (the same for every delivery and node). A key that
// does not parse is sent as it is: the node refuses it.
func keyedOf(c Change) keyedRun {
	r := keyedRun{Req: wire.RunNowRequest{Request: strconv.FormatInt(c.TaskID, 10), RunKey: c.RunKey}, Version: c.Version}
	if k, err := runkey.Parse(c.RunKey); err == nil && k.Trigger == wire.TriggerRetry {
		r.Req.Request, r.Retry = k.RequestID(), true
	}
	return r
}

// sendKeyed decides whether a keyed request still goes to the nodes: a
// backfill always (as a run-now, it runs a disabled job too); a retry
// only while the job is enabled and at the version its failed attempt ran
// (the core queued it at that version): a disable, delete or any change
// in between makes no further attempt.
func sendKeyed(r keyedRun, plan JobPlan) bool {
	if !r.Retry {
		return true
	}
	return plan.Exists && !plan.Deleting && plan.Job.Enabled && plan.Version == r.Version
}

// runKeyed sends a backfill or retry as runOnce does a run-now, unless
// sendKeyed says it no longer goes.
func runKeyed(ctx workflow.Context, in JobInput, r keyedRun) {
	var plan JobPlan
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.LoadJob, in.JobID).Get(ctx, &plan); err != nil || !plan.Exists || plan.Deleting {
		return
	}
	if !sendKeyed(r, plan) {
		workflow.GetLogger(ctx).Info("retry not sent: the job was disabled or changed since its failed attempt", "run_key", r.Req.RunKey)
		return
	}
	runOn(ctx, in, plan, r.Req.Request, r.Req.RunKey)
}

// cancelRuns asks every node of the shard to stop each run; only the node
// that runs it does anything (the others answer that it is not theirs),
// and a node that is down cannot be running it for the core to stop.
// Nodes are asked in parallel, so one slow node does not delay the stop.
func cancelRuns(ctx workflow.Context, in JobInput, keys []string) {
	if len(keys) == 0 {
		return
	}
	var plan JobPlan
	if err := workflow.ExecuteActivity(coreCtx(ctx), core.LoadJob, in.JobID).Get(ctx, &plan); err != nil || !plan.Exists {
		return
	}
	var pending []workflow.Future
	var names []string
	for _, key := range keys {
		for _, n := range plan.Nodes {
			req := wire.CancelRequest{Unit: plan.Job.UnitName(), RunKey: key}
			pending = append(pending, workflow.ExecuteActivity(nodeCtx(ctx, n.ID, in.NodeTimeout/2), node.CancelRun, req))
			names = append(names, n.Name)
		}
	}
	for i, f := range pending {
		var stopped bool
		if err := f.Get(ctx, &stopped); err != nil {
			workflow.GetLogger(ctx).Warn("cancel not delivered to node", "node", names[i], "err", err)
		} else if stopped {
			workflow.GetLogger(ctx).Info("run cancelled on node", "node", names[i])
		}
	}
}

// rootCause strips Temporal's activity error wrapping for status messages.
func rootCause(err error) string {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err.Error()
		}
		err = u.Unwrap()
	}
}
