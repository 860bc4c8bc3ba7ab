package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// A run-now request is a file the runner reads (wire.RunNowDir) and a
// start of the job's service. A start merges into one already under way
// (StartUnit on an activating oneshot): that start's runner decided before
// the request existed, or runs its timer's slot, so it never takes the
// request, and for a job that fires every minute every later start is a
// timely timer fire, which runs its slot too. So the agent does not trust
// one start: it watches the service and starts it again, once the start
// under way has ended, until a runner of the shard has decided the request
// (started it, or decided it a skip), bounded by the request's TTL.

// Bounds of the wait for a request to be taken.
const (
	// runNowMargin: the last start is made this long before the runner
	// would drop the request as too old.
	runNowMargin = 30 * time.Second
	// maxRunNowStarts bounds the agent's own starts of one request: a
	// start that ends without taking it (shared storage down, the runtime
	// dir full) is reported by its runner; trying forever would only
	// repeat that report.
	maxRunNowStarts = 3
	// storageWait bounds one look at the shard's stamps (RequestDecided):
	// shared storage that does not answer in it is hung, and the request
	// goes to the next node rather than the activity heart-beating on.
	storageWait = 10 * time.Second
)

// runNowHooks are what tests replace.
type runNowHooks struct {
	dir         string        // wire.RunNowDir
	poll        time.Duration // how often the service is looked at
	storageWait time.Duration // storageWait
	decided     func(lockDir string, owner int, jobID, request string) (bool, error)
	owner       func(unitFile string) (int, error) // the uid the unit runs as
}

func (m *Manager) runNowHooks() runNowHooks {
	h := m.runNow
	if h.dir == "" {
		h.dir = wire.RunNowDir
	}
	if h.poll == 0 {
		h.poll = time.Second
	}
	if h.storageWait == 0 {
		h.storageWait = storageWait
	}
	if h.decided == nil {
		h.decided = runner.RequestDecided
	}
	if h.owner == nil {
		h.owner = unitUID
	}
	return h
}

// RunNow starts one run of a job's service outside its schedule and waits
// until a runner has taken the request (see above). The request file
// names the request, so the runner keys the run by it and the shared
// run-now stamp runs it once however often it is started.
func (m *Manager) RunNow(ctx context.Context, req wire.RunNowRequest) error {
	unit := req.Unit
	if !runkey.ValidRequest(req.Request) {
		return fmt.Errorf("%w: request id %q is not valid", wire.ErrRunNowNotHere, req.Request)
	}
	if !strings.HasPrefix(unit, wire.UnitPrefix) || strings.ContainsAny(unit, "/\x00") {
		return fmt.Errorf("%w: %q is not a cron unit", wire.ErrRunNowNotHere, unit)
	}
	unitFile := filepath.Join(m.layout.UnitDir, unit+".service")
	if _, err := os.Stat(unitFile); err != nil {
		return fmt.Errorf("%w: %s is not on this node: %v", wire.ErrRunNowNotHere, unit, err)
	}
	spec, err := jobspec.Read(m.layout.specPath(unit))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", wire.ErrRunNowNotHere, unit, err)
	}
	h := m.runNowHooks()
	owner, err := h.owner(unitFile)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", wire.ErrRunNowNotHere, unit, err)
	}
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return fmt.Errorf("run now: %w", err)
	}
	keyLine, err := requestKeyLine(req, spec.ID)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", wire.ErrRunNowNotHere, unit, err)
	}
	at := m.now().UTC().Truncate(time.Second)
	body := req.Request + "\n" + at.Format(time.RFC3339) + "\n" + keyLine
	if _, err := writeIfChanged(filepath.Join(h.dir, unit), []byte(body), 0o644); err != nil {
		return fmt.Errorf("run now: %w", err)
	}
	return m.serveRequest(ctx, h, unit+extService, spec, owner, req.Request, at)
}

// requestKeyLine is the request file's third line for a request with a
// run key (a backfill or retry of this job whose request id is this very
// request), "" for a plain run-now. Any other key is refused: the runner
// would run it as nothing, and the core should ask no node.
func requestKeyLine(req wire.RunNowRequest, jobID string) (string, error) {
	if req.RunKey == "" {
		return "", nil
	}
	k, err := runkey.Parse(req.RunKey)
	switch {
	case err != nil:
		return "", err
	case (k.Trigger != wire.TriggerBackfill && k.Trigger != wire.TriggerRetry) || k.JobID != jobID || k.RequestID() != req.Request:
		return "", fmt.Errorf("run key %q is not a backfill or retry of job %s under request %q", req.RunKey, jobID, req.Request)
	}
	return req.RunKey + "\n", nil
}

// serveRequest starts the service until a runner took the request. A
// wait past runNowWaitGrace takes a place from the node's budget of long
// waits (runnowwaits.go), or gives the request up here.
func (m *Manager) serveRequest(ctx context.Context, h runNowHooks, service string, spec jobspec.Spec, owner int, request string, at time.Time) error {
	var st runNowState
	var release func() // the long wait's place, once taken
	defer func() {
		if release != nil {
			release()
		}
	}()
	for {
		obs, err := m.observeRunNow(ctx, h, service, spec, owner, request, at)
		if err != nil {
			return err
		}
		step := nextRunNow(obs, st)
		if step.Action == runNowWait && release == nil && obs.Age >= runNowWaitGrace {
			if release, err = m.waits.take(spec.Tenant); err != nil {
				return fmt.Errorf("%w: %s: %v", wire.ErrRunNowNotTaken, service, err)
			}
		}
		switch step.Action {
		case runNowDone:
			return nil
		case runNowGiveUp:
			return fmt.Errorf("%w: %s: %s", wire.ErrRunNowNotTaken, service, step.Reason)
		case runNowStart:
			if err := m.sys.StartUnit(ctx, service); err != nil {
				return fmt.Errorf("run now: start %s: %w", service, err)
			}
			st.Starts++
			st.StartedFrom = obs.InactiveSince
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run now: %s: %w", service, ctx.Err())
		case <-time.After(h.poll):
		}
	}
}

// observeRunNow reads what nextRunNow decides on. A property or stamp that
// cannot be read reads as "not yet": the next poll tries again, and the
// TTL bounds it all. Shared storage that does not answer within
// storageWait is an error: the request goes to the next node.
func (m *Manager) observeRunNow(ctx context.Context, h runNowHooks, service string, spec jobspec.Spec, owner int, request string, at time.Time) (runNowObs, error) {
	obs := runNowObs{Age: m.now().Sub(at)}
	decided, err := decidedWithin(ctx, h, spec, owner, request)
	switch {
	case errors.Is(err, errStorageHung):
		return obs, fmt.Errorf("%w: %s: %v", wire.ErrRunNowNotTaken, service, err)
	case err != nil:
		m.log.Warn("run now: cannot tell whether the request was taken", "unit", service, "err", err)
	}
	obs.Decided = decided
	if v, err := m.sys.UnitProperty(ctx, service, "", "ActiveState"); err == nil {
		obs.Active, _ = v.(string)
	}
	if v, err := m.sys.UnitProperty(ctx, service, "", "InactiveEnterTimestampMonotonic"); err == nil {
		obs.InactiveSince, _ = v.(uint64)
	}
	return obs, nil
}

var errStorageHung = errors.New("shared storage hung")

// decidedWithin asks h.decided, giving up after h.storageWait: a read of a
// hung network mount does not return (nor can it be interrupted), so it
// runs in a goroutine that is left behind when the wait ends. The caller
// then ends the request on this node, so at most one such read is left
// per request.
func decidedWithin(ctx context.Context, h runNowHooks, spec jobspec.Spec, owner int, request string) (bool, error) {
	type result struct {
		ok  bool
		err error
	}
	ch := make(chan result, 1) // the late answer of a left read goes nowhere
	go func() {
		ok, err := h.decided(spec.LockDir, owner, spec.ID, request)
		ch <- result{ok, err}
	}()
	t := time.NewTimer(h.storageWait)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.ok, r.err
	case <-t.C:
		return false, fmt.Errorf("%w: lock dir %s did not answer within %s", errStorageHung, spec.LockDir, h.storageWait)
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// unitUID is the uid of the unit's User=, whose lock dir it is.
func unitUID(unitFile string) (int, error) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "User="); ok {
			u, err := user.Lookup(name)
			if err != nil {
				return 0, fmt.Errorf("the unit's user %q: %w", name, err)
			}
			return strconv.Atoi(u.Uid)
		}
	}
	return 0, fmt.Errorf("%s names no User=", unitFile)
}

// runNowObs is what the agent sees of a pending request and its service.
type runNowObs struct {
	Decided       bool          // a runner of the shard took the request (runner.RequestDecided)
	Active        string        // the service's ActiveState
	InactiveSince uint64        // InactiveEnterTimestampMonotonic: changes when a start has ended
	Age           time.Duration // since the request was written
}

// runNowState is what the agent did so far for one request.
type runNowState struct {
	Starts      int
	StartedFrom uint64 // InactiveSince when the agent last started the service
}

type runNowAction int

const (
	runNowWait runNowAction = iota
	runNowStart
	runNowDone
	runNowGiveUp
)

type runNowStep struct {
	Action runNowAction
	Reason string // why it gives up
}

// nextRunNow decides the agent's next step for a pending request. It starts
// the service only when no start is under way (one would merge into it)
// and its own last start has ended; it gives up once the runner could no
// longer take the request in time, or its own starts never took it.
func nextRunNow(obs runNowObs, st runNowState) runNowStep {
	switch {
	case obs.Decided:
		return runNowStep{Action: runNowDone}
	case obs.Age >= wire.RunNowTTL-runNowMargin:
		why := "no start of the service took it"
		if busy(obs.Active) {
			why = "the job's run on this node still runs"
		}
		return runNowStep{Action: runNowGiveUp, Reason: fmt.Sprintf("not taken within %s: %s", wire.RunNowTTL-runNowMargin, why)}
	case busy(obs.Active):
		return runNowStep{Action: runNowWait}
	case st.Starts > 0 && obs.InactiveSince == st.StartedFrom:
		return runNowStep{Action: runNowWait} // its start is queued, not yet run
	case st.Starts >= maxRunNowStarts:
		return runNowStep{Action: runNowGiveUp, Reason: fmt.Sprintf("started %d times, no run took it (see the service's journal)", st.Starts)}
	}
	return runNowStep{Action: runNowStart}
}

// busy reports whether a start of the service is under way: a start now
// would merge into it.
func busy(activeState string) bool { return slices.Contains(busyStates, activeState) }

// busyStates are the ActiveStates of a unit that runs something.
var busyStates = []string{"activating", "active", "deactivating", "reloading"}
