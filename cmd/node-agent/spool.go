package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hostcron/hostcron/internal/outcome"
)

// spoolState prints the outcome spool's counts to stderr, so `state` shows
// undelivered and dead-lettered outcomes while stdout stays the units'
// JSON. A dead-lettered outcome needs an operator: the core will never see
// it unless it is moved back into the spool.
func spoolState(configPath string) {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return
	}
	pending, dead := outcome.SpoolCounts(cfg.SpoolDir)
	fmt.Fprintf(os.Stderr, "outcome spool %s: %d pending, %d dead-lettered (in %s)\n",
		cfg.SpoolDir, pending, dead, filepath.Join(cfg.SpoolDir, outcome.DeadLetterDir))
}
