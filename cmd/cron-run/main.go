// Command cron-run is the ExecStart of every hostcron cron service: it
// elects one node per slot and runs the tenant's command (see
// internal/runner).
package main

import (
	"os"

	"github.com/hostcron/hostcron/internal/runner"
)

func main() { os.Exit(runner.Main()) }
