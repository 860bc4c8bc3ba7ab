package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/schedule"
)

// calendarCmd prints the OnCalendar values for a cron expression and,
// optionally, the next fire times systemd will produce for them.
func calendarCmd() *cobra.Command {
	var tz string
	var next int
	cmd := &cobra.Command{
		Use:   "calendar EXPR",
		Short: "Translate a cron expression to systemd OnCalendar= values",
		Long: "Prints one OnCalendar= value per line; with --next N also the next N fire\n" +
			"times (RFC 3339, in the zone). Exits non-zero on an invalid expression.",
		Example: "  node-agent calendar '*/5 9-17 * * mon-fri' --tz Europe/Berlin --next 3",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := schedule.Parse(args[0], tz)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, v := range s.OnCalendar() {
				fmt.Fprintln(out, v)
			}
			for _, at := range s.NextN(time.Now(), next) {
				fmt.Fprintln(out, "next:", at.Format(time.RFC3339))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&tz, "tz", "UTC", "IANA time zone of the schedule")
	cmd.Flags().IntVar(&next, "next", 0, "also print the next N fire times")
	return cmd
}
