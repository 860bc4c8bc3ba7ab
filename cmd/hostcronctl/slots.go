package main

import (
	"net/url"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/apiclient"
)

// slotsCmd lists every fire time of a job's schedule in a range with what
// became of it: the answer to "why didn't it run on 30 March?".
func (a *app) slotsCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "slots JOB",
		Short: "Every fire time of a job's schedule in a range and what became of it (default: the last 24 hours)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			for k, v := range map[string]string{"from": from, "to": to} {
				if v != "" {
					q.Set(k, v)
				}
			}
			raw, err := a.client.Do(cmd.Context(), "GET", "/cron-jobs/"+url.PathEscape(args[0])+"/slots", q, nil, nil)
			if err != nil {
				return err
			}
			var slots []apiclient.Slot
			if err := apiclient.Decode(raw, "slots", &slots); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error { return slotTable(w, slots) })
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first slot, RFC 3339 (default: 24 hours before --to)")
	cmd.Flags().StringVar(&to, "to", "", "end of the range (exclusive), RFC 3339 (default: now, or 24 hours after --from)")
	return cmd
}

// slotTable prints one slot a line: its UTC instant ("-" for a wall time
// that did not exist), the wall time in the job's zone, its state and,
// when it has a record, the run's result and exit code.
func slotTable(w *tabwriter.Writer, slots []apiclient.Slot) error {
	row(w, "SLOT", "WALL TIME", "STATE", "RESULT", "EXIT", "NOTE")
	for _, s := range slots {
		result, exit, note := "-", "-", ""
		if s.Run != nil {
			result, exit = s.Run.Result, intOr(s.Run.ExitCode)
		}
		if s.OffSchedule {
			note = "not a fire time of the current schedule"
		}
		row(w, when(s.ScheduledAt), s.WallTime, s.State, result, exit, note)
	}
	return nil
}
