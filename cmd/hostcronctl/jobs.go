package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hostcron/hostcron/internal/apiclient"
)

func (a *app) jobsCmd() *cobra.Command {
	jobs := &cobra.Command{Use: "jobs", Short: "List, create, change and drive cron jobs"}
	jobs.AddCommand(a.jobsList(), a.jobsGet(), a.jobsCreate(), a.jobsUpdate(), a.jobsCancel())
	for _, act := range []struct{ name, short string }{
		{"enable", "Enable a job"}, {"disable", "Disable a job"}, {"retry", "Provision a failed job again"},
		{"run-now", "Run a job once, now"}, {"delete", "Delete a job (its units leave every node first)"},
	} {
		jobs.AddCommand(a.jobsAction(act.name, act.short))
	}
	return jobs
}

func (a *app) jobsList() *cobra.Command {
	var status string
	cmd := &cobra.Command{
		Use: "list", Short: "List the tenant's jobs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, err := a.tenant()
			if err != nil {
				return err
			}
			var q url.Values
			if status != "" {
				q = url.Values{"status": {status}} // the API filters (and checks the value)
			}
			raw, err := a.client.Do(cmd.Context(), "GET", "/tenants/"+url.PathEscape(tenant)+"/cron-jobs", q, nil, nil)
			if err != nil {
				return err
			}
			var list []apiclient.Job
			if err := apiclient.Decode(raw, "cron_jobs", &list); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error { return jobTable(w, list...) })
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only jobs in this status (active, disabled, auto_disabled, failed, pending, deleting)")
	return cmd
}

func (a *app) jobsGet() *cobra.Command {
	return &cobra.Command{
		Use: "get JOB", Short: "Show a job", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := a.client.Do(cmd.Context(), "GET", "/cron-jobs/"+url.PathEscape(args[0]), nil, nil, nil)
			if err != nil {
				return err
			}
			var j apiclient.Job
			if err := apiclient.Decode(raw, "", &j); err != nil {
				return err
			}
			return a.emit(raw, func(w *tabwriter.Writer) error { return jobTable(w, j) })
		},
	}
}

// jobFlags are a job's fields as flags; only those the user set are sent,
// so an update changes exactly them.
type jobFlags struct {
	webroot, schedule, timezone, command, workdir string
	timeout, memory, maxFailures                  int
	enabled                                       bool
}

func (f *jobFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.webroot, "webroot", "", "webroot id")
	fs.StringVar(&f.schedule, "schedule", "", `cron expression, e.g. "*/5 * * * *"`)
	fs.StringVar(&f.timezone, "timezone", "", "IANA zone of the schedule (default UTC)")
	fs.StringVar(&f.command, "command", "", "shell command, run in the webroot as the tenant")
	fs.StringVar(&f.workdir, "working-directory", "", "directory below the webroot to run in")
	fs.IntVar(&f.timeout, "timeout", 0, "timeout_seconds")
	fs.IntVar(&f.memory, "memory", 0, "max_memory_mb")
	fs.IntVar(&f.maxFailures, "max-failures", 0, "consecutive failures before the job is disabled (0: never)")
	fs.BoolVar(&f.enabled, "enabled", true, "whether the job runs")
}

// body holds the fields whose flags were set.
func (f *jobFlags) body(fs *pflag.FlagSet) map[string]any {
	b := map[string]any{}
	set := func(flag, field string, v any) {
		if fs.Changed(flag) {
			b[field] = v
		}
	}
	set("webroot", "webroot_id", f.webroot)
	set("schedule", "schedule", f.schedule)
	set("timezone", "timezone", f.timezone)
	set("command", "command", f.command)
	set("working-directory", "working_directory", f.workdir)
	set("timeout", "timeout_seconds", f.timeout)
	set("memory", "max_memory_mb", f.memory)
	set("max-failures", "max_failures", f.maxFailures)
	set("enabled", "enabled", f.enabled)
	return b
}

// waitFlags: long waits show progress and have a bound.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&w.wait, "wait", false, "wait until the change is on every node (or failed), showing progress")
	fs.DurationVar(&w.timeout, "wait-timeout", 5*time.Minute, "how long --wait waits")
}

func (a *app) jobsCreate() *cobra.Command {
	var f jobFlags
	var w waitFlags
	var idem string
	cmd := &cobra.Command{
		Use: "create --webroot ID --schedule EXPR --command CMD", Short: "Create a job", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tenant, err := a.tenant()
			if err != nil {
				return err
			}
			hdr := map[string]string{}
			if idem != "" {
				hdr["Idempotency-Key"] = idem
			}
			raw, err := a.client.Do(cmd.Context(), "POST", "/tenants/"+url.PathEscape(tenant)+"/cron-jobs", nil, f.body(cmd.Flags()), hdr)
			if err != nil {
				return err
			}
			return a.showChange(cmd.Context(), raw, w)
		},
	}
	f.register(cmd.Flags())
	w.register(cmd.Flags())
	cmd.Flags().StringVar(&idem, "idempotency-key", "", "makes a retried create return the first job instead of a second one")
	for _, req := range []string{"webroot", "schedule", "command"} {
		_ = cmd.MarkFlagRequired(req)
	}
	return cmd
}

func (a *app) jobsUpdate() *cobra.Command {
	var f jobFlags
	var w waitFlags
	var ifMatch int64
	cmd := &cobra.Command{
		Use: "update JOB [--schedule ...]", Short: "Change the fields given as flags; the others keep their value", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := f.body(cmd.Flags())
			if len(body) == 0 {
				return errors.New("nothing to change: give at least one field flag")
			}
			raw, err := a.client.Do(cmd.Context(), "PUT", "/cron-jobs/"+url.PathEscape(args[0]), nil, body, ifMatchHeader(ifMatch))
			if err != nil {
				return err
			}
			return a.showChange(cmd.Context(), raw, w)
		},
	}
	f.register(cmd.Flags())
	w.register(cmd.Flags())
	cmd.Flags().Int64Var(&ifMatch, "if-match", 0, "apply only if the job is at this version (412 otherwise)")
	return cmd
}

func ifMatchHeader(v int64) map[string]string {
	if v == 0 {
		return nil
	}
	return map[string]string{"If-Match": strconv.Quote(strconv.FormatInt(v, 10))}
}

func (a *app) jobsAction(action, short string) *cobra.Command {
	var w waitFlags
	var ifMatch int64
	cmd := &cobra.Command{
		Use: action + " JOB", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			method, path := "POST", "/cron-jobs/"+url.PathEscape(args[0])+"/"+action
			if action == "delete" {
				method, path = "DELETE", "/cron-jobs/"+url.PathEscape(args[0])
			}
			raw, err := a.client.Do(cmd.Context(), method, path, nil, nil, ifMatchHeader(ifMatch))
			if err != nil {
				return err
			}
			return a.showChange(cmd.Context(), raw, w)
		},
	}
	w.register(cmd.Flags())
	cmd.Flags().Int64Var(&ifMatch, "if-match", 0, "apply only if the job is at this version (412 otherwise)")
	return cmd
}

// showChange prints a changed job; with --wait it first follows the job
// until provisioning is over, printing each status it passes through.
func (a *app) showChange(ctx context.Context, raw []byte, w waitFlags) error {
	var j apiclient.Job
	if err := apiclient.Decode(raw, "", &j); err != nil {
		return err
	}
	if w.wait {
		final, err := a.waitSettled(ctx, j, w.timeout)
		if errors.Is(err, errDeleted) {
			return nil
		}
		if err != nil {
			return err
		}
		if raw, err = a.client.Do(ctx, "GET", "/cron-jobs/"+url.PathEscape(final.ID), nil, nil, nil); err != nil {
			return err
		}
		j = final
	}
	return a.emit(raw, func(tw *tabwriter.Writer) error { return jobTable(tw, j) })
}

// waitSettled polls a job until provisioning of its change is over.
// A deleted job is settled when it is gone.
func (a *app) waitSettled(ctx context.Context, j apiclient.Job, timeout time.Duration) (apiclient.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		if j.Status != last {
			fmt.Fprintf(a.err, "%s: %s %s\n", j.ID, j.Status, j.StatusMessage)
			last = j.Status
		}
		if j.Settled() {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return j, fmt.Errorf("job %s still %s after %v: %w", j.ID, j.Status, timeout, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
		raw, err := a.client.Do(ctx, "GET", "/cron-jobs/"+url.PathEscape(j.ID), nil, nil, nil)
		var ae *apiclient.Error
		// 410: the delete finished (404 from a core before deleted jobs
		// kept their history).
		if errors.As(err, &ae) && (ae.Status == 410 || ae.Status == 404) && j.Status == "deleting" {
			fmt.Fprintf(a.err, "%s: deleted\n", j.ID)
			return j, errDeleted
		}
		if err != nil {
			return j, err
		}
		if err := apiclient.Decode(raw, "", &j); err != nil {
			return j, err
		}
	}
}

// errDeleted ends a --wait on a delete: there is no job left to show.
var errDeleted = errors.New("the job is deleted")
