// Package clockoffset measures a node's clock against the core API's and
// keeps the last reading in a small file, so an operator sees a node whose
// clock drifts before it misnames slots (the runner's fire window and
// stamps assume clocks within seconds), and the runner can tell a corrupt
// stamp from a correct one its own slow clock reads as future.
package clockoffset

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
)

// FileName is the reading's file in the agent's state dir.
const FileName = "clock-offset.json"

// WarnAbove is the offset an operator is warned about: the runner's fire
// window tolerates seconds (FireMargin), not more.
const WarnAbove = 2 * time.Second

// Reading is one measurement: the core's clock minus this node's.
type Reading struct {
	OffsetSeconds float64   `json:"offset_seconds"`
	MeasuredAt    time.Time `json:"measured_at"`
	Source        string    `json:"source"` // the request measured against
	// BootID and Boottime are the kernel's boot id and CLOCK_BOOTTIME at
	// MeasuredAt. The runner judges the reading's age by CLOCK_BOOTTIME
	// (which no clock step moves and which counts suspend), and sees a
	// step of the wall clock since the measurement as wall time and boot
	// time elapsed apart. A reading without them (an older agent) or from
	// another boot is not trusted to verify the clock.
	BootID   string        `json:"boot_id,omitempty"`
	Boottime time.Duration `json:"boottime_ns,omitempty"`
}

// Boot is the kernel's boot id and CLOCK_BOOTTIME at one moment.
type Boot struct {
	ID   string
	Time time.Duration
}

// bootIDFile names this boot of the kernel.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// CurrentBoot reads the boot id and CLOCK_BOOTTIME now.
func CurrentBoot() (Boot, error) {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return Boot{}, fmt.Errorf("boot id: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return Boot{}, fmt.Errorf("CLOCK_BOOTTIME: %w", err)
	}
	return Boot{ID: strings.TrimSpace(string(b)), Time: time.Duration(ts.Nano())}, nil
}

// Offset is the reading as a duration.
func (r Reading) Offset() time.Duration {
	return time.Duration(r.OffsetSeconds * float64(time.Second))
}

// Measure compares the core's Date header with the midpoint of the
// request, sent and received by this node's clock. Date has one-second
// resolution, so the reading is good to about a second plus half the
// round trip: enough to see a drifting node.
func Measure(sent, received time.Time, date string) (time.Duration, error) {
	core, err := http.ParseTime(date)
	if err != nil {
		return 0, fmt.Errorf("core API Date header %q: %w", date, err)
	}
	mid := sent.Add(received.Sub(sent) / 2)
	// The header truncates to the second: compare with its middle.
	return core.Add(500 * time.Millisecond).Sub(mid).Round(100 * time.Millisecond), nil
}

// Write stores a reading in dir.
func Write(dir string, r Reading) error { return WriteFile(filepath.Join(dir, FileName), r) }

// Read loads the last reading from dir.
func Read(dir string) (Reading, error) { return ReadFile(filepath.Join(dir, FileName)) }

// WriteFile stores a reading at path, world-readable: the runner, which
// runs as the tenant, reads the copy in /run (wire.ClockOffsetFile).
func WriteFile(path string, r Reading) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode clock offset: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write clock offset: %w", err)
	}
	return nil
}

// ReadFile loads a reading from path.
func ReadFile(path string) (Reading, error) {
	var r Reading
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("read clock offset: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode clock offset %s: %w", path, err)
	}
	return r, nil
}

// Warning returns a one-line warning if the offset is above WarnAbove.
func (r Reading) Warning() string {
	off := r.Offset()
	if off < 0 {
		off = -off
	}
	if off <= WarnAbove {
		return ""
	}
	return fmt.Sprintf("WARNING: this node's clock is %s off the core API's (measured %s), more than %s: fix NTP",
		r.Offset(), r.MeasuredAt.UTC().Format(time.RFC3339), WarnAbove)
}
