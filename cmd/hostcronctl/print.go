package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hostcron/hostcron/internal/apiclient"
)

// emit prints an answer: as JSON (the API's own, indented), or as the
// table the command builds from it.
func (a *app) emit(raw json.RawMessage, table func(*tabwriter.Writer) error) error {
	if a.output == "json" {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("print answer: %w", err)
		}
		buf.WriteByte('\n')
		_, err := a.out.Write(buf.Bytes())
		return err
	}
	w := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	if err := table(w); err != nil {
		return err
	}
	return w.Flush()
}

// row writes one tab-separated table row; cells never carry a tab or a
// newline of their own (a command may), so the table stays a table.
func row(w *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = strings.NewReplacer("\t", " ", "\n", "⏎", "\r", "").Replace(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

func jobTable(w *tabwriter.Writer, jobs ...apiclient.Job) error {
	row(w, "ID", "SCHEDULE", "TZ", "STATUS", "FAILURES", "NEXT RUN", "COMMAND")
	for _, j := range jobs {
		row(w, j.ID, j.Schedule, j.Timezone, j.Status, fmt.Sprint(j.ConsecutiveFailures), when(j.NextRunAt), clip(j.Command, 50))
	}
	return nil
}

func runTable(w *tabwriter.Writer, runs ...apiclient.Run) error {
	row(w, "SLOT", "RESULT", "EXIT", "DURATION", "REASON")
	for _, r := range runs {
		row(w, r.ScheduledAt.UTC().Format(time.RFC3339), r.Result, intOr(r.ExitCode), duration(r.DurationMS), clip(r.FailureReason, 60))
	}
	return nil
}

func when(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func intOr(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func duration(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return (time.Duration(*ms) * time.Millisecond).String()
}

// clip shortens s to n runes for a table cell.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
