package store

import "github.com/hostcron/hostcron/internal/wire"

// IsFailure reports whether a result is the tenant's failure (see
// wire.Result.IsFailure): the only kind that counts towards auto-disable.
func IsFailure(r wire.Result) bool { return r.IsFailure() }

// counted reports whether a result moves the failure counter at all
// (a failure increments it, a success resets it).
func counted(r wire.Result) bool { return r == wire.ResultSuccess || IsFailure(r) }

// countedResults lists, for SQL, the results CountFailures looks at.
func countedResults() []string {
	all := append(append([]wire.Result{}, wire.NodeResults...), wire.ResultLost)
	var out []string
	for _, r := range all {
		if counted(r) {
			out = append(out, string(r))
		}
	}
	return out
}

// CountFailures gives the failure counter of a job from its recent
// results, oldest slot first: the tenant failures after the last success.
// disable says the counter reached maxFailures (0 = never disable).
func CountFailures(results []wire.Result, maxFailures int) (failures int, disable bool) {
	for _, r := range results {
		switch {
		case r == wire.ResultSuccess:
			failures = 0
		case IsFailure(r):
			failures++
		}
	}
	return failures, maxFailures > 0 && failures >= maxFailures
}

// autoDisableStep is what a recount does to a job's state.
type autoDisableStep int

const (
	keepState autoDisableStep = iota
	tripAutoDisable
	liftAutoDisable
)

// decideAutoDisable turns a recount into a state change. A job trips once
// (an auto-disabled, disabled or deleting job stays as it is). Only a
// recount after an outcome that corrected the history (correctsHistory)
// lifts an auto-disable, and only an auto-disable: an outcome that merely
// arrives after the disable (a run still in flight) never does, so
// otherwise only enable and retry lift it.
func decideAutoDisable(j CronJob, disable, corrected bool) autoDisableStep {
	switch {
	case disable && j.Enabled && j.Status != wire.StatusAutoDisabled && j.Status != wire.StatusDeleting:
		return tripAutoDisable
	case !disable && corrected && j.Status == wire.StatusAutoDisabled:
		return liftAutoDisable
	}
	return keepState
}

// recordStep is what recording an outcome under a known run key does.
type recordStep int

const (
	insertRun recordStep = iota
	replaceRun
	duplicateRun
)

// decideRecord says whether an outcome is a new run, replaces the record
// already stored under its run key, or is a duplicate. A node's report
// replaces the sweeper's lost record, and a real result replaces an
// overlap skip or a platform error; any other second report is a
// redelivery. A platform error is reported by a node that did not run the
// command (its shared storage failed before or during the election, or
// its runner died before the command started), while a healthy node of
// the shard may have run the slot: that node's result is the run's,
// whichever report arrives first. Or it is reported by the node that ran
// the command, when that node's shutdown stopped the run
// (outcome.ShutDown): no other node runs that slot, so nothing replaces it.
func decideRecord(stored *wire.Result, incoming wire.Result) recordStep {
	switch {
	case stored == nil:
		return insertRun
	case *stored == wire.ResultLost && incoming != wire.ResultLost:
		return replaceRun
	case *stored == wire.ResultOverlapSkipped && incoming != wire.ResultOverlapSkipped && incoming != wire.ResultLost:
		return replaceRun
	case *stored == wire.ResultPlatformError && (counted(incoming) || incoming == wire.ResultCancelled): // the result of the node that ran it
		return replaceRun
	case *stored == wire.ResultCancelled && counted(incoming):
		// A runner stopped before its command started (the cancel caught
		// it electing) let another node take the slot: that node ran it.
		return replaceRun
	}
	return duplicateRun
}

// rearms reports whether a change restarts the job's schedule, so the
// nodes must not run slots before it (not_before): it was enabled, or its
// schedule or time zone changed. A command-only edit does not.
func rearms(before, after CronJob) bool {
	return (!before.Enabled && after.Enabled) || before.Schedule != after.Schedule || before.Timezone != after.Timezone
}
