// Package desired is what the core tells a node about one cron job: the
// wire type between the workflows and the node agent, and its translation
// into the node's two artefacts, the unit pair and the job spec.
package desired

import (
	"fmt"

	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/units"
)

// Job is one cron job as a node must have it.
type Job struct {
	ID               string `json:"id"`
	Tenant           string `json:"tenant"`
	Version          int64  `json:"version"`
	Enabled          bool   `json:"enabled"`
	User             string `json:"user"`
	Group            string `json:"group"`
	Webroot          string `json:"webroot"`
	WebStorageDir    string `json:"web_storage_dir"` // the shard's shared storage; locks live below it
	Schedule         string `json:"schedule"`
	Timezone         string `json:"timezone"`
	Command          string `json:"command"`
	WorkingDirectory string `json:"working_directory"`
	TimeoutSec       int    `json:"timeout_seconds"`
	MemoryMaxMB      int    `json:"max_memory_mb"`
}

// UnitName is cron-{tenant}-{id}.
func (j Job) UnitName() string { return units.Name(j.Tenant, j.ID) }

// LockDir is {webStorageDir}/{tenant}/.locks.
func (j Job) LockDir() string { return j.WebStorageDir + "/" + j.Tenant + "/.locks" }

// Translate checks the job and returns its unit description and spec.
// Schedules may carry a seconds field here (see schedule.ParseWithSeconds).
func (j Job) Translate() (units.Job, jobspec.Spec, error) {
	sched, err := schedule.ParseWithSeconds(j.Schedule, j.Timezone)
	if err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	if err := jobspec.ValidateCommand(j.Command); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: command %w", j.ID, err)
	}
	if err := jobspec.ValidateWorkingDirectory(j.WorkingDirectory); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: working directory %w", j.ID, err)
	}
	u := units.Job{
		Tenant: j.Tenant, ID: j.ID, Version: j.Version, User: j.User, Group: j.Group,
		Webroot: j.Webroot, LockDir: j.LockDir(), OnCalendar: sched.OnCalendar(),
		TimeoutSec: j.TimeoutSec, MemoryMaxMB: j.MemoryMaxMB,
		RandomizedDelaySec: units.DelayFor(sched.MinInterval()),
	}
	if err := u.Validate(); err != nil {
		return units.Job{}, jobspec.Spec{}, fmt.Errorf("job %s: %w", j.ID, err)
	}
	spec := jobspec.Spec{
		Tenant: j.Tenant, ID: j.ID, Version: j.Version, Schedule: j.Schedule, Timezone: j.Timezone,
		Command: j.Command, WorkingDirectory: j.WorkingDirectory, Webroot: j.Webroot, LockDir: j.LockDir(),
		MemoryMaxMB: j.MemoryMaxMB,
	}
	return u, spec, nil
}
