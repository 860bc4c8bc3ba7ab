// Package desired translates what the core tells a node about one cron job
// (wire.Job) into the node's two artefacts: the unit pair and the run spec.
package desired

import (
	"fmt"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// Node is what the node, not the job, adds to every job's units.
type Node struct {
	// DenyAddresses are control-plane IPs or CIDRs (Temporal, Loki, core
	// internal endpoints) that tenants' commands must not reach; any
	// spelling units.ParseDenyAddress takes. Never the core API address
	// cron-outcome reports to: IPAddressDeny= filters the unit's whole
	// cgroup, ExecStopPost=+ included.
	DenyAddresses []string
}

// Translate checks the job and returns its unit description and spec.
// Schedules may carry a seconds field here (see schedule.ParseWithSeconds).
func Translate(j wire.Job, node Node) (units.Job, jobspec.Spec, error) {
	sched, err := calendarFor(j.Schedule, j.Timezone)
	if err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	if err := jobspec.ValidateCommand(j.Command); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: command %w", j.ID, err)
	}
	if err := jobspec.ValidateWorkingDirectory(j.WorkingDirectory); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: working directory %w", j.ID, err)
	}
	if j.CatchUpWindowSec < 0 || j.CatchUpWindowSec > wire.MaxCatchUpWindowSec {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: catch-up window %ds: want 0 to %d", j.ID, j.CatchUpWindowSec, wire.MaxCatchUpWindowSec)
	}
	if !j.OverlapPolicy.Valid() {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: unknown overlap policy %q", j.ID, j.OverlapPolicy)
	}
	if err := jobspec.ValidateEnvironment(j.Environment); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: environment %w", j.ID, err)
	}
	deny := make([]string, 0, len(node.DenyAddresses))
	for _, a := range node.DenyAddresses {
		canon, err := units.ParseDenyAddress(a)
		if err != nil {
			return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: node config: %w", j.ID, err)
		}
		deny = append(deny, canon)
	}
	u := units.Job{
		Tenant: j.Tenant, ID: j.ID, User: j.User, Group: j.Group,
		Webroot: j.Webroot, LockDir: j.LockDir(), OnCalendar: sched.onCalendar,
		TimeoutSec: j.TimeoutSec, MemoryMaxMB: j.MemoryMaxMB,
		RandomizedDelaySec: units.DelayFor(sched.minInterval),
		DenyAddresses:      deny,
		Persistent:         j.CatchUpWindowSec > 0,
		WaitSec:            jobspec.StartWaitSec(j.OverlapPolicy, j.CatchUpWindowSec, j.TimeoutSec),
	}
	if err := u.Validate(); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	spec := jobspec.Spec{
		Tenant: j.Tenant, ID: j.ID, Version: j.Version, Rev: j.Rev, Schedule: j.Schedule, Timezone: j.Timezone,
		Command: j.Command, WorkingDirectory: j.WorkingDirectory, Webroot: j.Webroot, LockDir: j.LockDir(),
		MemoryMaxMB: j.MemoryMaxMB, TimeoutSec: j.TimeoutSec,
		NotBefore: j.NotBefore, RandomizedDelaySec: u.RandomizedDelaySec,
		CatchUpWindowSec: j.CatchUpWindowSec, OverlapPolicy: j.OverlapPolicy, WaitSec: u.WaitSec,
		// Only the spec (root's, 0600) carries the values; u never does.
		Environment: j.Environment,
	}
	return u, spec, nil
}
