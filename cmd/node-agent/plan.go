package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/unitmgr"
)

// planCmd prints what `reconcile` would do with the same desired set,
// changing nothing (like terraform plan).
func planCmd(configPath *string, log *slog.Logger) *cobra.Command {
	var file string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plan --file JOBS.json [--json]",
		Short: "Print what reconcile would do to this node's cron units, changing nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jobs, err := readJobs(file)
			if err != nil {
				return err
			}
			return useManager(cmd.Context(), *configPath, log, func(m *unitmgr.Manager) error {
				p, err := m.Plan(cmd.Context(), unitmgr.Request{Op: unitmgr.OpReconcile, Jobs: jobs, Operator: true})
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(p)
				}
				return printPlan(cmd.OutOrStdout(), p)
			})
		},
	}
	cmd.Flags().StringVar(&file, "file", "-", "JSON array of desired jobs (- for stdin), as for reconcile")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

// printPlan writes one line per step with its reason, then the jobs that
// cannot be applied and those the node has in a newer version.
func printPlan(w io.Writer, p unitmgr.Plan) error {
	var err error
	line := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format+"\n", args...)
		}
	}
	if len(p.Steps) == 0 {
		line("no changes")
	}
	for _, s := range p.Steps {
		line("%s", s)
	}
	for _, f := range p.Failed {
		line("failed   %s", f)
	}
	for _, k := range p.Kept {
		line("kept     %s — the node has a newer version", k)
	}
	for _, k := range p.Stale {
		line("stale    %s — removed on this node at this version or later (tombstone)", k)
	}
	return err
}
