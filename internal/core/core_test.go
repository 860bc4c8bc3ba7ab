package core

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/pgtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func get(t *testing.T, url string) (int, error) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestStartServesAndStopEnds: the core migrates and serves on the address
// it reports; Stop releases the address, so a restart on it (the
// harness's API outage) works, and a second Stop is harmless.
func TestStartServesAndStopEnds(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	cfg := Config{DatabaseURL: db.DSN, Listen: "127.0.0.1:0", AdminKey: "k", Log: quiet,
		Housekeeping: &housekeeping.Config{Interval: 50 * time.Millisecond}}
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + c.Addr() + "/healthz"
	if code, err := get(t, url); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz: %d, %v", code, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if _, err := get(t, url); err == nil {
		t.Error("the API still answers after Stop")
	}
	cfg.Listen = c.Addr()
	again, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("restart on %s: %v", cfg.Listen, err)
	}
	defer again.Stop(ctx)
	if code, err := get(t, url); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz after restart: %d, %v", code, err)
	}
}

// TestStartFailsCleanly: a taken address fails Start, which returns an
// error instead of a core that never serves.
func TestStartFailsCleanly(t *testing.T) {
	db := pgtest.NewDB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Start(context.Background(), Config{DatabaseURL: db.DSN, Listen: ln.Addr().String(), Log: quiet})
	if err == nil {
		c.Stop(context.Background())
		t.Fatal("Start on a taken address succeeded")
	}
}

// TestRunStopsOnContext: the command's SIGTERM path; Run returns once its
// context ends, without error.
func TestRunStopsOnContext(t *testing.T) {
	db := pgtest.NewDB(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, Config{DatabaseURL: db.DSN, Listen: addr, Log: quiet}, 5*time.Second) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get(t, "http://"+addr+"/healthz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the core did not come up")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := get(t, "http://"+addr+"/healthz"); err == nil {
		t.Error("the API still answers after Run returned")
	}
}

// TestStartsWithTemporalDown: the core starts and serves while Temporal
// does not answer, and /healthz says so.
func TestStartsWithTemporalDown(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	c, err := Start(ctx, Config{DatabaseURL: db.DSN, Listen: "127.0.0.1:0", Log: quiet, TemporalAddress: "127.0.0.1:1"})
	if err != nil {
		t.Fatalf("start with Temporal down: %v", err)
	}
	defer c.Stop(ctx)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "temporal unreachable") {
		t.Errorf("GET /healthz = %d %s; want 503 naming Temporal", resp.StatusCode, body)
	}
}
