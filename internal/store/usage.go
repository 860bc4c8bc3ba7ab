package store

import "fmt"

// NearLimit is the share of a job's timeout or memory limit at which a run
// carries a warning: the tenant sees the limit coming before a run fails
// on it.
const NearLimit = 0.8

// usageWarnings are the warnings a run earns against its job's limits: it
// lasted at least NearLimit of timeout_seconds, or its peak memory reached
// NearLimit of max_memory_mb. A run that hit the limit (timeout, oom) has
// its result say so; it gets the warning too, which is true. Never nil,
// so the column and the JSON hold an empty list.
func usageWarnings(job CronJob, o Outcome) []string {
	out := []string{}
	if o.StartedAt != nil && o.FinishedAt != nil && job.TimeoutSeconds > 0 {
		took := o.FinishedAt.Sub(*o.StartedAt).Seconds()
		if took >= NearLimit*float64(job.TimeoutSeconds) {
			out = append(out, fmt.Sprintf("ran %.0f s of its %d s timeout (%.0f%%)", took, job.TimeoutSeconds, 100*took/float64(job.TimeoutSeconds)))
		}
	}
	if o.PeakMemoryBytes != nil && job.MaxMemoryMB > 0 {
		limit := float64(job.MaxMemoryMB) * (1 << 20)
		if peak := float64(*o.PeakMemoryBytes); peak >= NearLimit*limit {
			out = append(out, fmt.Sprintf("peak memory %.0f MiB of its %d MiB limit (%.0f%%)", peak/(1<<20), job.MaxMemoryMB, 100*peak/limit))
		}
	}
	return out
}
