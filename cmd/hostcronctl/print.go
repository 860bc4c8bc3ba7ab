package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

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

// row writes one tab-separated table row of cleaned cells.
func row(w *tabwriter.Writer, cells ...string) {
	for i, c := range cells {
		cells[i] = clean(c)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// clean makes text a tenant wrote (a command, its output) safe for a
// terminal: control characters, escape sequences (which can rewrite the
// screen, set the clipboard or a window title) and bidirectional
// overrides are shown as \xNN / \u escapes, a tab as a space and a
// newline as ⏎, so a table stays a table.
func clean(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteByte(' ')
		case r == '\n':
			b.WriteString("⏎")
		case r == utf8.RuneError, unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
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
