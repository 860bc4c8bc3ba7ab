package main

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/apiclient"
)

func (a *app) runsCmd() *cobra.Command {
	var limit int
	var follow bool
	var every time.Duration
	cmd := &cobra.Command{
		Use: "runs JOB", Short: "A job's run history, newest slot first (--follow: print new runs as they are recorded)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/cron-jobs/" + url.PathEscape(args[0]) + "/runs"
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			raw, err := a.client.Do(cmd.Context(), "GET", path, q, nil, nil)
			if err != nil {
				return err
			}
			var runs []apiclient.Run
			if err := apiclient.Decode(raw, "runs", &runs); err != nil {
				return err
			}
			if !follow {
				return a.emit(raw, func(w *tabwriter.Writer) error { return runTable(w, runs...) })
			}
			every = max(every, time.Second) // a loop without a pause would hammer the API
			return a.follow(cmd, path, runs, every)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many runs (1-1000)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing runs as they are recorded, until interrupted")
	cmd.Flags().DurationVar(&every, "every", 2*time.Second, "how often --follow asks")
	return cmd
}

// follow prints the runs it has, oldest first, then each new or changed
// run (a lost slot whose real outcome arrived late changes) as it is
// recorded, one line or one JSON object per run, until interrupted.
func (a *app) follow(cmd *cobra.Command, path string, runs []apiclient.Run, every time.Duration) error {
	seen := map[int64]string{}
	show := func(batch []apiclient.Run) error {
		slices.SortFunc(batch, func(x, y apiclient.Run) int { return x.ScheduledAt.Compare(y.ScheduledAt) })
		for _, r := range batch {
			sig := r.Result + "/" + r.RunKey
			if seen[r.ID] == sig {
				continue
			}
			seen[r.ID] = sig
			if a.output == "json" {
				if err := a.emit(mustJSON(r), nil); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(a.out, "%s  %-14s exit=%s  %s  %s\n", r.ScheduledAt.UTC().Format(time.RFC3339), clean(r.Result), intOr(r.ExitCode), duration(r.DurationMS), clean(r.FailureReason))
		}
		return nil
	}
	if err := show(runs); err != nil {
		return err
	}
	for {
		select {
		case <-cmd.Context().Done():
			return nil
		case <-time.After(every):
		}
		raw, err := a.client.Do(cmd.Context(), "GET", path, url.Values{"limit": {"100"}}, nil, nil)
		if err != nil {
			if cmd.Context().Err() != nil {
				return nil
			}
			fmt.Fprintln(a.err, "hostcronctl: still following:", err)
			continue
		}
		var batch []apiclient.Run
		if err := apiclient.Decode(raw, "runs", &batch); err != nil {
			return err
		}
		if err := show(batch); err != nil {
			return err
		}
	}
}

func (a *app) logsCmd() *cobra.Command {
	var job, since, contains string
	var limit int
	cmd := &cobra.Command{
		Use: "logs", Short: "The tenant's cron output, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, err := a.tenant()
			if err != nil {
				return err
			}
			q := url.Values{"log_type": {"cron"}, "limit": {strconv.Itoa(limit)}}
			for k, v := range map[string]string{"cron_job_id": job, "since": since, "contains": contains} {
				if v != "" {
					q.Set(k, v)
				}
			}
			raw, err := a.client.Do(cmd.Context(), "GET", "/tenants/"+url.PathEscape(tenant)+"/logs", q, nil, nil)
			if err != nil {
				return err
			}
			var lines []apiclient.Line
			if err := apiclient.Decode(raw, "lines", &lines); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error {
				row(w, "TIME", "NODE", "JOB", "LINE")
				for _, l := range lines {
					row(w, l.Timestamp.UTC().Format(time.RFC3339Nano), l.Node, l.CronJobID, l.Line)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&job, "job", "", "only this job's output")
	cmd.Flags().StringVar(&since, "since", "", "a duration back (15m) or an RFC 3339 time (default 1h)")
	cmd.Flags().StringVar(&contains, "contains", "", "only lines containing this text")
	cmd.Flags().IntVar(&limit, "limit", 100, "most lines (1-5000)")
	return cmd
}

func (a *app) previewCmd() *cobra.Command {
	var tz string
	var count int
	cmd := &cobra.Command{
		Use: "preview EXPR", Short: "Show a cron expression's next fire times and systemd OnCalendar values", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{"schedule": {args[0]}, "count": {strconv.Itoa(count)}}
			if tz != "" {
				q.Set("timezone", tz)
			}
			raw, err := a.client.Do(cmd.Context(), "GET", "/cron-preview", q, nil, nil)
			if err != nil {
				return err
			}
			var p struct {
				Explanation string      `json:"explanation"`
				OnCalendar  []string    `json:"on_calendar"`
				NextRuns    []time.Time `json:"next_runs"`
				DSTNotes    []struct {
					Kind    string `json:"kind"`
					Message string `json:"message"`
				} `json:"dst_notes"`
			}
			if err := apiclient.Decode(raw, "", &p); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error {
				row(w, "means", p.Explanation)
				for _, n := range p.DSTNotes {
					row(w, n.Kind, n.Message)
				}
				for _, oc := range p.OnCalendar {
					row(w, "OnCalendar", oc)
				}
				for _, t := range p.NextRuns {
					row(w, "next", t.Format(time.RFC3339))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&tz, "timezone", "", "IANA zone (default UTC)")
	cmd.Flags().IntVar(&count, "count", 5, "how many fire times")
	return cmd
}

// jobsCancel asks the API to stop one run; with --wait it follows the run
// until a node has recorded how it ended (cancelled, or its own result if
// it ended first).
func (a *app) jobsCancel() *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "cancel JOB RUN", Short: "Stop a queued or running run (RUN: its key, as run-now printed it, or its id)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/cron-jobs/" + url.PathEscape(args[0]) + "/runs/" + url.PathEscape(args[1])
			raw, err := a.client.Do(cmd.Context(), "POST", path+"/cancel", nil, nil, nil)
			if err != nil {
				return err
			}
			if !wait {
				return a.emit(raw, func(w *tabwriter.Writer) error {
					row(w, "RUN", "STATE")
					row(w, args[1], "cancel_requested")
					return nil
				})
			}
			run, raw, err := a.waitRecorded(cmd, path, timeout)
			if err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error { return runTable(w, run) })
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the run's end is recorded, showing progress")
	cmd.Flags().DurationVar(&timeout, "wait-timeout", 2*time.Minute, "how long --wait waits")
	return cmd
}

// waitRecorded polls a run until it has a recorded result (not queued).
func (a *app) waitRecorded(cmd *cobra.Command, path string, timeout time.Duration) (apiclient.Run, []byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		raw, err := a.client.Do(cmd.Context(), "GET", path, nil, nil, nil)
		if err == nil {
			var r apiclient.Run
			if err := apiclient.Decode(raw, "", &r); err != nil {
				return r, nil, err
			}
			if r.Result != "" && r.Result != "queued" {
				return r, raw, nil
			}
		}
		if time.Now().After(deadline) {
			return apiclient.Run{}, nil, fmt.Errorf("run not recorded within %s (the cancel stays requested)", timeout)
		}
		fmt.Fprintln(a.err, "waiting for the run's end to be recorded…")
		select {
		case <-cmd.Context().Done():
			return apiclient.Run{}, nil, cmd.Context().Err()
		case <-time.After(time.Second):
		}
	}
}
