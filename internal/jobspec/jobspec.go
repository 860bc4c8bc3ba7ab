// Package jobspec is the per-job file the node agent writes and the runner
// reads: everything a run needs that a tenant controls. Keeping the
// command here, not in the unit, means no tenant text is ever parsed by
// systemd.
package jobspec

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/hostcron/hostcron/internal/wire"
)

// Spec describes one cron job for the runner.
type Spec struct {
	Tenant  string `json:"tenant"`
	ID      string `json:"id"`
	Version int64  `json:"version"`
	// Rev is the core's transaction that wrote this version (wire.Job.Rev):
	// a converge decides by it whether its snapshot knew this job.
	Rev              uint64 `json:"rev,omitempty"`
	Schedule         string `json:"schedule"`
	Timezone         string `json:"timezone"`
	Command          string `json:"command"`
	WorkingDirectory string `json:"working_directory"` // relative to Webroot; "" = Webroot
	Webroot          string `json:"webroot"`
	LockDir          string `json:"lock_dir"`
	MemoryMaxMB      int    `json:"max_memory_mb"` // also in the unit; see runner's memory watch
	// TimeoutSec is the unit's TimeoutStartSec, which bounds a catch-up's
	// wait and the runner's wait on output (0 in an older agent's spec: no
	// catch-up wait, the output wait unbounded by it).
	TimeoutSec int `json:"timeout_seconds,omitempty"`
	// RandomizedDelaySec is the timer's random delay: a fire later than
	// slot + delay + the runner's margin is a late fire.
	RandomizedDelaySec int `json:"randomized_delay_sec"`
	// NotBefore: no slot before it runs (the job was enabled or its
	// schedule changed then).
	NotBefore time.Time `json:"not_before,omitempty"`
	// CatchUpWindowSec: a late fire (a reboot, an outage, a late start)
	// runs the latest slot if it is at most this old, with trigger
	// catchup; 0 (and a spec of an older agent, which has no such field,
	// or the unused "catch_up" placeholder) never catches up.
	CatchUpWindowSec int `json:"catchup_window_seconds,omitempty"`
	// OverlapPolicy is what a slot does while the previous run still runs
	// (wire.OverlapPolicies); "" (an older core or agent) is skip.
	OverlapPolicy wire.OverlapPolicy `json:"overlap_policy,omitempty"`
	// WaitSec is how long a start may wait before its command starts
	// (StartWaitSec): the unit's TimeoutStartSec is TimeoutSec + WaitSec,
	// and with WaitSec > 0 the runner enforces TimeoutSec itself from the
	// command's start. 0 (skip without catch-up, or an older agent):
	// TimeoutStartSec is the timeout, and systemd alone enforces it.
	WaitSec int `json:"wait_seconds,omitempty"`
	// Environment are the job's variables for its command
	// (ValidateEnvironment). They may be secrets: this file is root's,
	// mode 0600, and the unit passes it in as a credential; the values are
	// never in a unit file.
	Environment map[string]string `json:"environment,omitempty"`
}

// Bounds of StartWaitSec, in seconds: runner.CatchUpSpread (the longest
// catch-up wait), runner.KillGrace (how long a stopped command may take to
// end), runner.WaitSlack (a holder's record, release and outcome hook),
// and startSlackSec for the rest of a start that is not the command: the
// election's wait for a stamp, the kill grace of a command the runner
// stops at its timeout, the output drain's margin.
const (
	catchUpSpreadSec = 120
	killGraceSec     = 10
	waitSlackSec     = 30
	startSlackSec    = 60
)

// StartWaitSec is the longest a start of a job may wait before its command
// starts: a catch-up's spread wait, or a buffer_one or cancel_previous
// slot's wait for the previous run, which ends by its timeout (plus the
// kill grace) at the latest. 0 for skip without a catch-up window: such a
// start never waits.
func StartWaitSec(policy wire.OverlapPolicy, catchUpWindowSec, timeoutSec int) int {
	switch {
	case policy.OrSkip() != wire.OverlapSkip:
		return max(timeoutSec, 0) + killGraceSec + waitSlackSec + catchUpSpreadSec + startSlackSec
	case catchUpWindowSec > 0:
		return catchUpSpreadSec + startSlackSec
	}
	return 0
}

// MaxCommandLen bounds a command like a crontab line.
const MaxCommandLen = 4096

// ValidateCommand accepts what fits on one crontab line: no control
// characters (so no newline or NUL). It is run by /bin/sh -c as given;
// unlike crontab, '%' has no special meaning.
func ValidateCommand(cmd string) error {
	switch {
	case strings.TrimSpace(cmd) == "":
		return fmt.Errorf("must not be empty")
	case len(cmd) > MaxCommandLen:
		return fmt.Errorf("is %d bytes, at most %d allowed", len(cmd), MaxCommandLen)
	}
	for _, r := range cmd {
		if r == unicode.ReplacementChar || (unicode.IsControl(r) && r != '\t') {
			return fmt.Errorf("contains a control character or invalid UTF-8 (%U)", r)
		}
	}
	return nil
}

var workdirRE = regexp.MustCompile(`^[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*(/[A-Za-z0-9_@+-][A-Za-z0-9._@+-]*)*$`)

// ValidateWorkingDirectory accepts "" (the webroot) or a clean relative path
// inside the webroot.
func ValidateWorkingDirectory(dir string) error {
	if dir == "" {
		return nil
	}
	if len(dir) > 512 || !workdirRE.MatchString(dir) {
		return fmt.Errorf("must be a relative path inside the webroot of letters, digits and ._@+- (no leading '/', no '..')")
	}
	for _, el := range strings.Split(dir, "/") {
		if el == "." || el == ".." {
			return fmt.Errorf("must not contain '.' or '..' elements")
		}
	}
	return nil
}

// Marshal encodes the spec.
func (s Spec) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode job spec %s: %w", s.ID, err)
	}
	return append(b, '\n'), nil
}

// Read loads and checks a spec file.
func Read(path string) (Spec, error) {
	var s Spec
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("read job spec: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("decode job spec %s: %w", path, err)
	}
	if err := ValidateCommand(s.Command); err != nil {
		return s, fmt.Errorf("job spec %s: command %w", path, err)
	}
	if err := ValidateWorkingDirectory(s.WorkingDirectory); err != nil {
		return s, fmt.Errorf("job spec %s: working directory %w", path, err)
	}
	if !s.OverlapPolicy.Valid() {
		return s, fmt.Errorf("job spec %s: unknown overlap policy %q", path, s.OverlapPolicy)
	}
	return s, nil
}

// Dir is the working directory of a run: the webroot or a directory in it.
func (s Spec) Dir() string {
	if s.WorkingDirectory == "" {
		return s.Webroot
	}
	return s.Webroot + "/" + s.WorkingDirectory
}
