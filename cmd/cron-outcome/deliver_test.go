package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

// A report the core refuses for good goes to the dead letters; when they
// cannot take it (dead/ unwritable, full of this run's letters, on another
// filesystem), it is spooled instead, for the agent to post again and
// dead-letter: never only a log line (review s21b).
func TestRefusedReportThatCannotBeDeadLetteredIsSpooled(t *testing.T) {
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":{"code":"invalid","message":"scheduled_at is in the future"}}`, http.StatusBadRequest)
	}))
	defer core.Close()
	client := outcome.Client{BaseURL: core.URL, Credential: "c", HTTP: core.Client()}
	slot := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	report := wire.Outcome{RunKey: runkey.Scheduled(testJob, slot), Version: 1, ScheduledAt: slot, Result: wire.ResultSuccess}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name                  string
		deadUsable            bool
		wantPending, wantDead int
	}{
		{"dead letters usable", true, 0, 1},
		{"dead/ is not a directory", false, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if !c.deadUsable {
				if err := os.WriteFile(filepath.Join(dir, outcome.DeadLetterDir), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := deliver(context.Background(), client, dir, testJob, report, log); err == nil {
				t.Fatal("a refused report answered no error")
			}
			if pending, dead := outcome.SpoolCounts(dir); pending != c.wantPending || dead != c.wantDead {
				t.Fatalf("%d pending, %d dead, want %d and %d", pending, dead, c.wantPending, c.wantDead)
			}
		})
	}
}
