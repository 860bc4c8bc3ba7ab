package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Group commit of outcomes (issue 16). One transaction per outcome costs
// one WAL flush per outcome; a top-of-minute burst of thousands of
// outcomes then waits on fsync. RecordOutcomes records many outcomes in
// one transaction, each in a savepoint of its own and with its statements
// pipelined (recordOneOutcome: three round trips where there were nine),
// and OutcomeBatcher
// feeds it whatever outcomes arrived while the previous batch committed.
// An outcome is answered only after the commit that holds it: the node
// deletes what it was answered for from its spool.

// OutcomeRequest is one outcome as a node reported it.
type OutcomeRequest struct {
	Node    Node
	JobID   string
	Outcome Outcome
}

// OutcomeAnswer is what recording one request did: what RecordOutcome
// would have returned for it.
type OutcomeAnswer struct {
	Result OutcomeResult
	Err    error
}

// RecordOutcomes records reqs in one transaction and answers each (in
// reqs' order) as RecordOutcome would have, had they been recorded one
// after another in job id order (reqs of one job in their order):
//   - each outcome runs recordOneOutcome; when one fails (an unknown job,
//     a version ahead, a constraint), the transaction is rolled back and
//     the batch recorded again with each outcome in a savepoint: the one
//     that fails is rolled back alone and answered with its own error,
//     the others go on;
//   - job rows are locked in job id order, and the operator's
//     platform_error events (a shard's, shared by its jobs) are written
//     after all of them, in shard order: two batches (two core replicas)
//     over the same jobs and shards never wait on each other in a cycle;
//   - an outcome whose platform_error fails to be written cannot be
//     rolled back alone (its savepoint is released): the batch is rolled
//     back and recorded again without it;
//   - when the transaction fails (begin, a savepoint, the commit), every
//     outcome still in it gets the error and none is recorded.
func (s *Store) RecordOutcomes(ctx context.Context, reqs []OutcomeRequest) []OutcomeAnswer {
	answers := make([]OutcomeAnswer, len(reqs))
	pending := outcomeOrder(reqs)
	savepoints := false // until an outcome fails
	for len(pending) > 0 {
		failed, err := s.recordBatch(ctx, reqs, pending, answers, savepoints)
		if err == nil {
			return answers
		}
		if errors.Is(err, errOutcomeFailed) {
			savepoints = true
			continue
		}
		if failed < 0 {
			slog.Warn("outcome batch failed; its outcomes stay with the nodes", "outcomes", len(pending), "err", err)
			for _, i := range pending {
				answers[i] = OutcomeAnswer{Err: err}
			}
			return answers
		}
		answers[failed] = OutcomeAnswer{Err: err}
		pending = slices.DeleteFunc(pending, func(i int) bool { return i == failed })
	}
	return answers
}

// outcomeOrder is the order a batch records reqs in, as indexes: by job
// id (the lock order), outcomes of one job in their arrival order.
func outcomeOrder(reqs []OutcomeRequest) []int {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].JobID, reqs[b].JobID) })
	return order
}

// operatorNoteOrder is the order a batch writes the operator's events in:
// the recorded outcomes of order that owe one (needsOperatorNote), by
// shard (the events' lock order), then in order.
func operatorNoteOrder(reqs []OutcomeRequest, order []int, answers []OutcomeAnswer) []int {
	var notes []int
	for _, i := range order {
		if answers[i].Err == nil && needsOperatorNote(answers[i].Result) {
			notes = append(notes, i)
		}
	}
	slices.SortStableFunc(notes, func(a, b int) int { return cmp.Compare(reqs[a].Node.ShardID, reqs[b].Node.ShardID) })
	return notes
}

// errOutcomeFailed ends an attempt without savepoints in which an outcome
// failed: the attempt is rolled back and the batch recorded again with a
// savepoint around each outcome, so the failure is that outcome's alone.
var errOutcomeFailed = errors.New("an outcome of the batch failed")

// recordBatch is one attempt at the transaction of RecordOutcomes over
// the requests order names; it fills their answers. Without savepoints
// (the first attempt: a savepoint is a round trip per outcome) any
// outcome's failure ends it with errOutcomeFailed. err is nil when it
// committed; otherwise failed is the request whose operator event failed
// (to be answered with err and left out of the next attempt), or -1 when
// the whole transaction failed.
func (s *Store) recordBatch(ctx context.Context, reqs []OutcomeRequest, order []int, answers []OutcomeAnswer, savepoints bool) (failed int, err error) {
	failed = -1
	ctx, woke := s.wakeAfterCommit(ctx)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// One job's row held elsewhere (an update, the sweeper, another
		// replica's batch) must not hold up the other tenants' outcomes
		// until the batch's deadline: a lock wait past batchLockTimeout
		// fails that outcome's statement alone (its savepoint, in the
		// attempt with savepoints), and its node reports it again.
		if _, err := tx.Exec(ctx, batchLockTimeoutSQL); err != nil {
			return fmt.Errorf("outcome batch lock timeout: %w", err)
		}
		var sp savepoint
		for _, i := range order {
			if !savepoints {
				res, err := recordOneOutcome(ctx, tx, reqs[i].Node, reqs[i].JobID, reqs[i].Outcome)
				if err != nil {
					return fmt.Errorf("%w: %w", errOutcomeFailed, err)
				}
				answers[i] = OutcomeAnswer{Result: res}
				continue
			}
			answer, err := sp.record(ctx, tx, reqs[i])
			if err != nil {
				return err
			}
			answers[i] = answer
		}
		for _, i := range operatorNoteOrder(reqs, order, answers) {
			r := reqs[i]
			if err := notifyOperatorOutcome(ctx, tx, r.Node, answers[i].Result.Job, false, r.Outcome); err != nil {
				failed = i
				return err
			}
		}
		return nil
	})
	woke(err)
	if err != nil && failed < 0 && !errors.Is(err, errOutcomeFailed) {
		err = fmt.Errorf("record outcome batch of %d: %w", len(order), err)
	}
	return failed, err
}

// batchLockTimeoutSQL bounds each lock wait of a batch's statements: two
// seconds is far longer than any writer holds a job row for (an outcome,
// an update, the sweeper's claim, another batch) unless it is stuck, so
// a busy machine does not fail outcomes for nothing, and short enough
// that the rest of the batch is not held for the batch's deadline. An
// outcome failed by it stays in its node's spool and is reported again.
const batchLockTimeoutSQL = "SET LOCAL lock_timeout = '2s'"

// savepoint runs each outcome of a batch in a savepoint of its own, one
// at a time, with one round trip per outcome: the savepoint after a
// recorded outcome is released and the next one set in the same simple
// query, and a savepoint rolled back to stays set for the next outcome.
type savepoint struct {
	set   bool // the savepoint is set
	fresh bool // and nothing was recorded since it was set
}

// record runs recordOneOutcome for r in a savepoint of tx. The outcome's
// own failure is its answer (its savepoint rolled back); err is a failure
// of the savepoint itself, which dooms the transaction.
func (sp *savepoint) record(ctx context.Context, tx pgx.Tx, r OutcomeRequest) (OutcomeAnswer, error) {
	if !sp.fresh {
		stmt := "SAVEPOINT outcome"
		if sp.set {
			stmt = "RELEASE SAVEPOINT outcome; SAVEPOINT outcome"
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return OutcomeAnswer{}, fmt.Errorf("outcome savepoint: %w", err)
		}
		sp.set, sp.fresh = true, true
	}
	res, ownErr := recordOneOutcome(ctx, tx, r.Node, r.JobID, r.Outcome)
	if ownErr != nil {
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT outcome"); err != nil {
			return OutcomeAnswer{}, fmt.Errorf("roll back outcome savepoint (after %v): %w", ownErr, err)
		}
		return OutcomeAnswer{Result: res, Err: ownErr}, nil
	}
	sp.fresh = false
	return OutcomeAnswer{Result: res}, nil
}

// BatchConfig bounds an OutcomeBatcher; zero values take the defaults.
type BatchConfig struct {
	// MaxBatch is the most outcomes one transaction records (default
	// 256): a transaction holds its jobs' rows until it commits.
	MaxBatch int
	// Flushers is the most batches in flight at once (default 16, half
	// the core's default pool): one flusher's statements are one
	// connection's round trips one after another, so with fewer flushers
	// than callers the core would record fewer outcomes side by side
	// than it did with a transaction each (measured on a CPU-bound
	// machine: docs/benchmarks.md). Outcomes beyond them share commits.
	Flushers int
	// Timeout bounds one batch's transaction (default 30 s): it runs on
	// no caller's context, since it answers many.
	Timeout time.Duration
}

// OutcomeBatcher records concurrent outcomes in shared transactions
// (group commit): an outcome arriving while Flushers batches are in
// flight waits for the next, which takes everything queued (up to
// MaxBatch); an outcome arriving to an idle batcher starts a batch at
// once (no delay waits for company). It has no goroutine while idle.
type OutcomeBatcher struct {
	store *Store
	cfg   BatchConfig

	mu       sync.Mutex
	queue    []*queuedOutcome
	flushers int // batches in flight
}

type queuedOutcome struct {
	req    OutcomeRequest
	answer chan OutcomeAnswer // buffered: a flusher never waits on a caller
	// caller is the caller's context: an outcome whose caller gave up
	// before its batch was taken is not recorded (the caller returned an
	// error, so its node keeps the outcome and reports it again), so a
	// batcher that falls behind does not record every resent copy.
	caller context.Context
}

// NewOutcomeBatcher returns a batcher recording into s.
func (s *Store) NewOutcomeBatcher(cfg BatchConfig) *OutcomeBatcher {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 256
	}
	if cfg.Flushers <= 0 {
		cfg.Flushers = 16
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	return &OutcomeBatcher{store: s, cfg: cfg}
}

// RecordOutcome queues the outcome for the next batch and returns its
// answer once the batch has committed (or failed). A caller whose ctx ends
// first gets ctx's error; its outcome may still be recorded, and the
// node's redelivery is then a duplicate.
func (b *OutcomeBatcher) RecordOutcome(ctx context.Context, node Node, jobID string, o Outcome) (OutcomeResult, error) {
	q := &queuedOutcome{req: OutcomeRequest{Node: node, JobID: jobID, Outcome: o}, answer: make(chan OutcomeAnswer, 1), caller: ctx}
	b.mu.Lock()
	b.queue = append(b.queue, q)
	if b.flushers < b.cfg.Flushers {
		b.flushers++
		go b.flush()
	}
	b.mu.Unlock()
	select {
	case a := <-q.answer:
		return a.Result, a.Err
	case <-ctx.Done():
		return OutcomeResult{}, fmt.Errorf("record outcome: waiting for its batch: %w", ctx.Err())
	}
}

// flush records batches until the queue is empty.
func (b *OutcomeBatcher) flush() {
	for {
		batch := b.take()
		if batch == nil {
			return
		}
		reqs := make([]OutcomeRequest, len(batch))
		for i, q := range batch {
			reqs[i] = q.req
		}
		answers := b.record(reqs)
		for i, q := range batch {
			q.answer <- answers[i]
		}
	}
}

// record is RecordOutcomes on the batch's own deadline. A panic in it
// answers the batch with an error instead of ending the process (in a
// request's goroutine, the HTTP server would have recovered it).
func (b *OutcomeBatcher) record(reqs []OutcomeRequest) (answers []OutcomeAnswer) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("outcome batch panicked; its outcomes stay with the nodes", "outcomes", len(reqs), "panic", p)
			answers = make([]OutcomeAnswer, len(reqs))
			for i := range answers {
				answers[i] = OutcomeAnswer{Err: fmt.Errorf("record outcome batch: panic: %v", p)}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.Timeout)
	defer cancel()
	return b.store.RecordOutcomes(ctx, reqs)
}

// take removes the next batch from the queue; nil (and one flusher less)
// when the queue is empty.
func (b *OutcomeBatcher) take() []*queuedOutcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = slices.DeleteFunc(b.queue, func(q *queuedOutcome) bool { return q.caller.Err() != nil })
	n := min(len(b.queue), b.cfg.MaxBatch)
	if n == 0 {
		b.flushers--
		return nil
	}
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	return batch
}
