package main

import (
	"fmt"
	"io"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/runner"
)

// showClockOffset prints the daemon's last clock reading for `state`, on
// stderr and without brackets, so the JSON answer on stdout stays as is.
func showClockOffset(configPath string, w io.Writer) {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return
	}
	r, err := clockoffset.Read(cfg.StateDir)
	if err != nil {
		fmt.Fprintln(w, "clock offset against the core API: not measured yet (the daemon measures it when it announces)")
		return
	}
	fmt.Fprintf(w, "clock offset against the core API: %s (core minus node, measured %s at %s)\n",
		r.Offset(), r.MeasuredAt.UTC().Format(time.RFC3339), r.Source)
	if warn := r.Warning(); warn != "" {
		fmt.Fprintln(w, warn)
	}
	if refusal := clockRefusal(r); refusal != "" {
		fmt.Fprintln(w, refusal)
	}
}

// clockRefusal says, for a reading more than runner.MaxSkew off, that the
// runner refuses every cron run on this node: it reports no outcome for
// them (runner.KindClockRefused), so the agent is where an operator sees it.
func clockRefusal(r clockoffset.Reading) string {
	if r.Offset().Abs() <= runner.MaxSkew {
		return ""
	}
	return fmt.Sprintf("ERROR: this node's clock is %s off the core API's, more than %s: cron-run refuses every run on this node until NTP fixes it (the slots run on the other nodes of the shard, or are recorded lost)",
		r.Offset(), runner.MaxSkew)
}
