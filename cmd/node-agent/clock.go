package main

import (
	"fmt"
	"io"
	"time"

	"github.com/hostcron/hostcron/internal/clockoffset"
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
}
