package outcome

import "github.com/hostcron/hostcron/internal/wire"

// SystemStopping is systemd's SystemState while the node shuts down:
// from the moment a job for shutdown.target is queued (reboot, poweroff,
// halt, kexec) until PID 1 hands over to systemd-shutdown.
const SystemStopping = "stopping"

// ShutdownMatters reports whether r's result would change if its node was
// shutting down (ShutDown), so the hook asks PID 1 only then: a success,
// a skip, a platform error or a cancel is reported as it is anyway.
func ShutdownMatters(r wire.Outcome) bool {
	return r.Result.IsFailure() && r.Result != wire.ResultOOM
}

// ShutDown turns the failure of a run that ended while its node was shutting
// down (systemState is PID 1's SystemState) into platform_error: the
// shutdown stopped the service (SIGTERM to its processes, SIGKILL after
// TimeoutStopSec), which is the platform's doing and must not count towards
// the job's auto-disable. The run's own exit code and signal stay in the
// report. An OOM kill keeps its result: the job's memory limit ended it,
// not the stop. A failure that happened to end during a shutdown is
// reported as the platform's too; the state is PID 1's, so a tenant cannot
// make a failure of its own look like one.
func ShutDown(r wire.Outcome, systemState string) wire.Outcome {
	if systemState != SystemStopping || !ShutdownMatters(r) {
		return r
	}
	was := r.FailureReason
	if was == "" {
		was = string(r.Result)
	}
	r.Result, r.Shutdown = wire.ResultPlatformError, true
	r.FailureReason = "the node shut down while the run was under way: " + was
	return r
}
