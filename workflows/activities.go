package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// The activities take the two sides through these small interfaces, not
// the concrete store and unit manager: the core API and the node agent
// both link this package, and neither must link the other's side (the
// database driver on the nodes, D-Bus in the core). cmd/core-api's deps
// test guards it.

// CoreStore is what the core's activities need of the database;
// *store.Store has it.
type CoreStore interface {
	JobPlan(ctx context.Context, jobID string) (wire.JobPlan, error)
	SetProvisioned(ctx context.Context, jobID string, version int64, status wire.Status, message string, took int) (bool, error)
	FinishDelete(ctx context.Context, jobID string) error
	NodeDesiredJobs(ctx context.Context, nodeID string) (set wire.DesiredSet, ok bool, err error)
	ShardNodeIDs(ctx context.Context, shardID string) ([]string, error)
	ShardIDs(ctx context.Context) ([]string, error)
	RecordConverge(ctx context.Context, nodeID, errText string) error
}

// NodeUnits is the node's unit manager as the node activities use it;
// *unitmgr.Manager has it.
type NodeUnits interface {
	Apply(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error)
	Delete(ctx context.Context, names []string, version int64) (wire.NodeReport, error)
	Reconcile(ctx context.Context, set wire.DesiredSet) (wire.NodeReport, error)
	RunNow(ctx context.Context, req wire.RunNowRequest) error
	CancelRun(ctx context.Context, req wire.CancelRequest) (bool, error)
	State(ctx context.Context) ([]wire.UnitState, error)
}

// DesiredSource reads a node's desired set from the core in pages;
// desiredset.Client has it. An error wrapping desiredset.ErrRefused or
// wire.ErrRevisionsAhead will not change on retry.
type DesiredSource interface {
	DesiredSet(ctx context.Context, nodeID string) (wire.DesiredSet, error)
}

// DigestSource is a DesiredSource that also answers the set's digest
// (desiredset.Client has it): with a NodeUnits that is a FastConverger, a
// converge asks for the digest first and may skip the read (the converge
// fast path, docs/semantics.md).
type DigestSource interface {
	Digest(ctx context.Context, nodeID string) (wire.DesiredDigest, error)
}

// FastConverger tells whether a converge to a set of a digest has
// nothing to do (*unitmgr.Manager has it).
type FastConverger interface {
	ReconcileUnchanged(ctx context.Context, digest func(context.Context) (wire.DesiredDigest, error)) (bool, string, error)
}

// CoreActivities read and write the core's database.
type CoreActivities struct {
	Store CoreStore
}

// LoadJob returns the job's current state and its shard's nodes. A job
// that no longer exists yields Exists=false.
func (a *CoreActivities) LoadJob(ctx context.Context, jobID string) (JobPlan, error) {
	return a.Store.JobPlan(ctx, jobID)
}

// SetJobStatus records provisioning's verdict for a version; it changes
// nothing if the job moved on meanwhile. took is how many nodes have the
// version: the lost-run sweep never counts a slot no node had, and a job
// no node took is stored failed, not active (store.provisionedVerdict).
// (A task scheduled by a workflow worker older than the argument decodes
// it as 0: its active on a shard with nodes means every node took it; a
// failed starts the sweep at the job's next provisioning or first
// reported run, never early.)
func (a *CoreActivities) SetJobStatus(ctx context.Context, jobID string, version int64, status wire.Status, message string, took int) (bool, error) {
	return a.Store.SetProvisioned(ctx, jobID, version, status, message, took)
}

// FinishDelete removes a job whose units are gone from its nodes.
func (a *CoreActivities) FinishDelete(ctx context.Context, jobID string) error {
	return a.Store.FinishDelete(ctx, jobID)
}

// DesiredSetForNode is every job the node's shard has, with the snapshot
// they were read in (the node decides orphans by it). ConvergeNode calls
// it on its side of the snapshot gate only.
func (a *CoreActivities) DesiredSetForNode(ctx context.Context, nodeID string) (wire.DesiredSet, error) {
	set, ok, err := a.Store.NodeDesiredJobs(ctx, nodeID)
	if errors.Is(err, wire.ErrRevisionsAhead) {
		// Retrying does not move the counter: the operator must.
		return wire.DesiredSet{}, temporal.NewNonRetryableApplicationError(err.Error(), "RevisionsAhead", nil)
	}
	if err != nil {
		return wire.DesiredSet{}, err // the database may come back: retried
	}
	if !ok {
		// A node that is not registered will not become so by retrying.
		return wire.DesiredSet{}, temporal.NewNonRetryableApplicationError("unknown node "+nodeID, "NotFound", nil)
	}
	return set, nil
}

// DesiredForNode is the activity of converges from before snapshots: the
// bare job list, as their histories expect it (a run replayed after the
// upgrade whose read was not done yet still runs it). An activity's result
// type never changes under its name; new runs call DesiredSetForNode.
func (a *CoreActivities) DesiredForNode(ctx context.Context, nodeID string) ([]wire.Job, error) {
	set, err := a.DesiredSetForNode(ctx, nodeID)
	return set.Jobs, err
}

// NoteConverge records a node's converge result (errText empty: it
// succeeded): the operator's node_not_converged notifications read it.
func (a *CoreActivities) NoteConverge(ctx context.Context, nodeID, errText string) error {
	return a.Store.RecordConverge(ctx, nodeID, errText)
}

// ShardNodes lists the nodes of a shard.
func (a *CoreActivities) ShardNodes(ctx context.Context, shardID string) ([]string, error) {
	return a.Store.ShardNodeIDs(ctx, shardID)
}

// AllShards lists every shard.
func (a *CoreActivities) AllShards(ctx context.Context) ([]string, error) {
	return a.Store.ShardIDs(ctx)
}

// NodeActivities change one node's units; each node agent registers them
// on its own task queue. Every operation is idempotent.
type NodeActivities struct {
	Units NodeUnits
	// Admission is what this node accepts whatever a task says (see
	// trust.Admit): the last line if the core, its keys or its database
	// are wrong.
	Admission trust.Policy
	// Desired reads the node's desired set from the core
	// (ReconcileFromCore); nil on an agent without a core API address,
	// whose paged converges then fail.
	Desired DesiredSource
	// Completer, when set and Units is QueuedUnits, completes ApplyJobs
	// and RemoveUnits asynchronously (completeLater); nil, they wait.
	Completer Completer
	// AfterConverge, when set, is started in a goroutine of its own as a
	// converge read from the core (ReconcileFromCore) returns, fast or
	// full, failed or not (an agent without a core API has none to run
	// it after): the daemon hands the converge's garbage back to the
	// system a moment later (releaseMemory).
	AfterConverge func()

	queuedNow atomic.Int64 // changes waiting asynchronously (completeLater)
}

// QueuedUnits is a NodeUnits whose applies and deletes can be queued
// without waiting (*unitmgr.Manager has it): with a Completer, ApplyJobs
// and RemoveUnits complete asynchronously.
type QueuedUnits interface {
	ApplyThen(ctx context.Context, jobs []wire.Job, then func(wire.NodeReport, error)) error
	DeleteThen(ctx context.Context, names []string, version int64, then func(wire.NodeReport, error)) error
}

// Completer completes an activity that returned activity.ErrResultPending
// (the Temporal client has it).
type Completer interface {
	CompleteActivityWithOptions(ctx context.Context, opts client.CompleteActivityOptions) error
}

// ApplyJobs writes, enables or disables the given jobs.
func (a *NodeActivities) ApplyJobs(ctx context.Context, jobs []wire.Job) (wire.NodeReport, error) {
	admitted, refused := trust.Partition(jobs, a.Admission)
	answer := func(rep wire.NodeReport, err error) (wire.NodeReport, error) {
		rep.Failed = append(rep.Failed, refused...)
		if err != nil {
			return rep, err
		}
		if len(rep.Failed) > 0 {
			// A bad job will not get better by retrying.
			return rep, temporal.NewNonRetryableApplicationError(fmt.Sprint(rep.Failed), "ApplyFailed", nil)
		}
		return rep, nil
	}
	if q, ok := a.queued(ctx); ok {
		return a.completeLater(ctx, func(wait context.Context, then func(wire.NodeReport, error)) error {
			return q.ApplyThen(wait, admitted, then)
		}, answer)
	}
	return answer(a.Units.Apply(ctx, admitted))
}

// RemoveUnits stops and removes the units of jobs the core deleted at
// version (the delete-marked row's); the node keeps a tombstone so no
// older version of them comes back. A task from before versions were
// sent has 0 (a trailing argument it lacks decodes as zero); its
// tombstone then refuses every version (a deleted job's id never comes
// back).
func (a *NodeActivities) RemoveUnits(ctx context.Context, names []string, version int64) (wire.NodeReport, error) {
	if err := trust.AdmitUnits(names); err != nil {
		return wire.NodeReport{}, notAdmitted(err)
	}
	if q, ok := a.queued(ctx); ok {
		return a.completeLater(ctx, func(wait context.Context, then func(wire.NodeReport, error)) error {
			return q.DeleteThen(wait, names, version, then)
		}, func(rep wire.NodeReport, err error) (wire.NodeReport, error) { return rep, err })
	}
	return a.Units.Delete(ctx, names, version)
}

// queued is the unit manager as QueuedUnits when this activity may
// complete asynchronously: a Completer is set, ctx is an activity's, and
// fewer than maxQueued changes wait so (then it counts this one, until
// completeLater's wait ends; past the bound the activity waits for its
// change itself, holding its slot: the slots' back-pressure).
func (a *NodeActivities) queued(ctx context.Context) (QueuedUnits, bool) {
	q, ok := a.Units.(QueuedUnits)
	if !ok || a.Completer == nil || !activity.IsActivity(ctx) {
		return nil, false
	}
	if a.queuedNow.Add(1) > maxQueued {
		a.queuedNow.Add(-1)
		return nil, false
	}
	return q, true
}

// completeLater queues the activity's change (enqueue) and returns
// activity.ErrResultPending: the activity is completed through the
// Completer when the node's apply queue answers (answer shapes the result
// as the synchronous activity returns it). So a change waiting in the
// queue holds no activity slot and no activity goroutine, whose stack of
// some 32 KB made 1,024 waiting changes cost the agent 38 MB (issue 16):
// the queue's batches are bounded by what arrives during an apply, not by
// the agent's slots. At most maxQueued changes wait so (some 4-5 KB each);
// past that an activity waits synchronously, holding its slot, which
// brings back the slots' back-pressure. The wait ends at the activity's
// deadline, as the synchronous one's: a change whose batch has not
// started by then is dropped, nothing is completed, and Temporal retries
// it after its timeout, as it does an agent that died. The completion
// names the activity's workflow, types and task queue, which the payload
// signature is bound to (trust.Codec), exactly as the worker's own
// completion does. Activities completed so must not heartbeat-time-out:
// the node activities set no heartbeat timeout (nodeCtx).
func (a *NodeActivities) completeLater(ctx context.Context,
	enqueue func(wait context.Context, then func(wire.NodeReport, error)) error,
	answer func(wire.NodeReport, error) (wire.NodeReport, error),
) (wire.NodeReport, error) {
	info := activity.GetInfo(ctx)
	log := activity.GetLogger(ctx)
	opts := completion(info)
	// The wait outlives the activity's call (the SDK ends its context when
	// the method returns), holds none of its state, and ends at its
	// deadline.
	var wait context.Context
	var stop context.CancelFunc
	if info.Deadline.IsZero() { // Temporal always sets it (a start-to-close timeout)
		wait, stop = context.WithCancel(context.Background())
	} else {
		wait, stop = context.WithDeadline(context.Background(), info.Deadline)
	}
	context.AfterFunc(wait, func() { a.queuedNow.Add(-1) }) // counted by queued; answered, or dropped at the deadline
	err := enqueue(wait, func(rep wire.NodeReport, err error) {
		defer stop()
		opts.Result, opts.Err = answer(rep, err)
		if opts.Err != nil {
			opts.Result = nil
		}
		if wait.Err() != nil {
			// Past the deadline Temporal has timed the attempt out and
			// retries it; the retry finds the change applied.
			log.Debug("answered after the activity's deadline; not completed", "deadline", info.Deadline, "err", opts.Err)
			return
		}
		if opts.Err != nil {
			log.Warn("activity failed", "err", opts.Err) // as the SDK logs a returned error
		}
		// A batch answers all its changes at once: some completions at a
		// time, not one gRPC call (and its buffers) per change together.
		select {
		case completing <- struct{}{}:
			defer func() { <-completing }()
		case <-wait.Done():
			return
		}
		cctx, cancel := context.WithTimeout(wait, completeTimeout)
		defer cancel()
		if err := a.Completer.CompleteActivityWithOptions(cctx, opts); err != nil {
			log.Warn("complete the activity; Temporal retries it after its timeout", "err", err)
		}
	})
	if err != nil {
		stop()
		return answer(wire.NodeReport{}, err)
	}
	return wire.NodeReport{}, activity.ErrResultPending
}

// maxQueued bounds the changes that wait asynchronously (completeLater):
// 2,048 at some 5 KB each is about 10 MB, and a burst of 1,000 changes
// on a node (the minute) fits twice. A change counts until its
// completion call returns or its deadline passes, when it leaves the
// queue (unitmgr); one in the batch under way stays there until the
// batch ends, so at most about twice as many are held.
const maxQueued = 2048

// completing bounds the agent's completion calls in flight
// (completeLater): 64 at some 10-20 KB of gRPC buffers and stack each,
// and wide enough that a batch of 1,000 is completed in well under a
// second from a healthy frontend (the wait gives up at each activity's
// deadline).
var completing = make(chan struct{}, 64)

// completeTimeout bounds one completion call, within the activity's
// deadline.
const completeTimeout = 30 * time.Second

// completion is the completion of the activity info describes, with the
// serialization context the worker's own completion uses (the SDK's
// activity task handler: the client's namespace, which an empty one
// means, the workflow's ID and type, the activity type, the worker's task
// queue).
func completion(info activity.Info) client.CompleteActivityOptions {
	opts := client.CompleteActivityOptions{
		TaskToken:    info.TaskToken,
		WorkflowID:   info.WorkflowExecution.ID,
		ActivityType: info.ActivityType.Name,
		TaskQueue:    info.TaskQueue,
	}
	if info.WorkflowType != nil {
		opts.WorkflowType = info.WorkflowType.Name
	}
	return opts
}

// Reconcile makes the node's units the desired set jobs, read in snap: a
// unit the set lacks goes only if snap saw the write it was installed
// from. A task without a snapshot (from before snapshots were sent) has
// the zero one, which sees nothing: it removes no orphan.
func (a *NodeActivities) Reconcile(ctx context.Context, jobs []wire.Job, snap wire.Snapshot) (wire.NodeReport, error) {
	return a.reconcile(ctx, wire.DesiredSet{Jobs: jobs, Snapshot: snap})
}

// reconcile admits every job of the set (one refused job refuses the set)
// and reconciles the node's units to it.
func (a *NodeActivities) reconcile(ctx context.Context, set wire.DesiredSet) (wire.NodeReport, error) {
	if err := trust.AdmitAll(set.Jobs, a.Admission); err != nil {
		return wire.NodeReport{}, notAdmitted(err)
	}
	return a.Units.Reconcile(ctx, set)
}

// ReconcileFromCore is Reconcile for a converge that hands the node a
// reference, not its set: the node reads its desired set from the core in
// pages (desiredset.Assemble: every job is answered for by the one page
// whose id range holds it, and is judged by that page's snapshot), then
// reconciles once to the whole set, as Reconcile does
// (one plan, at most one daemon-reload). The reference names the node the
// converge is for; the core refuses any node but the caller its set, so a
// task on the wrong queue fails for good instead of converging this node.
// The report carries how many jobs the set held, and at most
// wire.MaxReportNames names a list.
func (a *NodeActivities) ReconcileFromCore(ctx context.Context, ref wire.DesiredSetRef) (wire.NodeReport, error) {
	if a.Desired == nil {
		return wire.NodeReport{}, temporal.NewNonRetryableApplicationError("this node agent has no core API to read its desired set from", "NoCoreAPI", nil)
	}
	defer a.afterConverge()
	// A large converge outlasts a fixed bound; the heartbeat shows it is
	// still at work (convergeCtx).
	stop := heartbeatWhile(ctx, ConvergeHeartbeat/3)
	defer stop()
	began := time.Now()
	if rep, done, err := a.fastConverge(ctx, ref.NodeID); done || err != nil {
		return rep, err
	}
	set, err := a.Desired.DesiredSet(ctx, ref.NodeID)
	read := time.Since(began)
	switch {
	case errors.Is(err, wire.ErrRevisionsAhead):
		// Retrying does not move the counter: the operator must.
		return wire.NodeReport{}, temporal.NewNonRetryableApplicationError(err.Error(), "RevisionsAhead", nil)
	case errors.Is(err, desiredset.ErrRefused):
		return wire.NodeReport{}, temporal.NewNonRetryableApplicationError(err.Error(), "DesiredSetRefused", nil)
	case err != nil:
		return wire.NodeReport{}, fmt.Errorf("read desired set: %w", err) // the core may come back: retried
	}
	// As a.reconcile, timed apart: admission looks up every job's accounts.
	admitStart := time.Now()
	if err := trust.AdmitAll(set.Jobs, a.Admission); err != nil {
		return wire.NodeReport{}, notAdmitted(err)
	}
	admit := time.Since(admitStart)
	rep, err := a.Units.Reconcile(ctx, set) // with its pages: each orphan is judged by the page that found it gone
	rep.Desired = len(set.Jobs)
	logConverge(ctx, ref.NodeID, began, read, admit, len(set.Jobs), err)
	// The report is a payload again: bounded, or a first converge of a
	// large shard would do its work and then fail on the report's size.
	return rep.Bounded(wire.MaxReportNames), err
}

// afterConverge starts AfterConverge, if any, without holding up the
// converge's answer.
func (a *NodeActivities) afterConverge() {
	if a.AfterConverge != nil {
		go a.AfterConverge()
	}
}

// fastConverge is the converge fast path: the core's digest of the set,
// then the unit manager's word that the node's last converge planned
// nothing for a set of that digest and nothing changed since. done: the
// converge is complete (its report names only the set's size). A digest
// that cannot be read (an older core answers 404, the core is away) is
// logged and the converge goes on in full, which reads the set and
// reports its own errors; only revisions ahead of the transaction counter
// fail here, as the full read would fail on them.
func (a *NodeActivities) fastConverge(ctx context.Context, nodeID string) (rep wire.NodeReport, done bool, err error) {
	ds, ok := a.Desired.(DigestSource)
	fc, ok2 := a.Units.(FastConverger)
	if !ok || !ok2 {
		return wire.NodeReport{}, false, nil
	}
	log := activityLog(ctx)
	began := time.Now()
	var d wire.DesiredDigest
	var digest time.Duration
	fast, why, err := fc.ReconcileUnchanged(ctx, func(ctx context.Context) (wire.DesiredDigest, error) {
		asked := time.Now() // the digest's own time, not the lock's or the stamp's before it
		var err error
		d, err = ds.Digest(ctx, nodeID)
		digest = time.Since(asked)
		return d, err
	})
	switch {
	case errors.Is(err, wire.ErrRevisionsAhead):
		return wire.NodeReport{}, false, temporal.NewNonRetryableApplicationError(err.Error(), "RevisionsAhead", nil)
	case err != nil:
		log.Warn("converge fast path: no digest from the core, or the node's state not read; converging in full", "node", nodeID, "err", err)
		return wire.NodeReport{}, false, nil
	}
	log.Info("converge fast path", "node", nodeID, "jobs", d.Jobs, "unchanged", fast, "why_not", why,
		"digest_ms", float64(digest.Microseconds())/1000, "total_ms", float64(time.Since(began).Microseconds())/1000)
	if !fast {
		return wire.NodeReport{}, false, nil
	}
	return wire.NodeReport{Desired: d.Jobs}, true, nil
}

// activityLog is the activity's logger (it names the workflow and the
// attempt), or slog's outside an activity (tests).
func activityLog(ctx context.Context) interface {
	Info(msg string, keyvals ...any)
	Warn(msg string, keyvals ...any)
} {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return slog.Default()
}

// logConverge logs where a converge's reconcile spent its time on the
// node: waiting in the task queue (scheduled to started, by Temporal's
// clock and the node's), reading the set, admitting its jobs,
// reconciling (issue 16).
func logConverge(ctx context.Context, nodeID string, began time.Time, read, admit time.Duration, jobs int, err error) {
	if !activity.IsActivity(ctx) {
		return
	}
	info := activity.GetInfo(ctx)
	activity.GetLogger(ctx).Info("converge reconciled", "node", nodeID, "jobs", jobs, "ok", err == nil,
		"attempt", info.Attempt,
		"queued_ms", float64(info.StartedTime.Sub(info.ScheduledTime).Microseconds())/1000,
		"read_set_ms", float64(read.Microseconds())/1000,
		"admit_ms", float64(admit.Microseconds())/1000,
		"reconcile_ms", float64((time.Since(began)-read-admit).Microseconds())/1000)
}

// RunNow starts one run of a job outside its schedule. The node waits
// until a runner took the request, which lasts as long as a run of the job
// already under way on the node (bounded by wire.RunNowTTL), so the
// activity heartbeats meanwhile. A request no start took in time goes to
// the next node, not again to this one; so does a node that cannot serve
// it at all (wire.ErrRunNowNotHere).
func (a *NodeActivities) RunNow(ctx context.Context, req wire.RunNowRequest) error {
	if err := trust.AdmitUnit(req.Unit); err != nil {
		return notAdmitted(err)
	}
	stop := heartbeatWhile(ctx, RunNowHeartbeat/3)
	defer stop()
	err := a.Units.RunNow(ctx, req)
	switch {
	case errors.Is(err, wire.ErrRunNowNotTaken):
		return temporal.NewNonRetryableApplicationError(err.Error(), "RunNowNotTaken", err)
	case errors.Is(err, wire.ErrRunNowNotHere):
		// The unit is not on this node, or its spec unreadable: a retry
		// fails the same way, so the next node is asked at once.
		return temporal.NewNonRetryableApplicationError(err.Error(), "RunNowNotHere", err)
	}
	return err
}

// CancelRun stops the unit's run named by req.RunKey if this node runs it
// now; it reports whether it did. A node that does not run it has
// nothing to do.
func (a *NodeActivities) CancelRun(ctx context.Context, req wire.CancelRequest) (bool, error) {
	if err := trust.AdmitUnit(req.Unit); err != nil {
		return false, notAdmitted(err)
	}
	return a.Units.CancelRun(ctx, req)
}

// heartbeatWhile records a heartbeat every interval until stop is called.
func heartbeatWhile(ctx context.Context, every time.Duration) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// notAdmitted fails a node task for good: a refused task will not be
// admitted on a retry.
func notAdmitted(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), "NotAdmitted", err)
}
