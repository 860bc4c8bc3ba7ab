package outcome

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestCancelled(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 30, 0, time.UTC)
	const key, inv = "k", "0123abcd"
	mk := &wire.CancelMarker{RunKey: key, InvocationID: inv, At: at}
	for _, tc := range []struct {
		name   string
		result wire.Result
		marker *wire.CancelMarker
		inv    string
		want   wire.Result
	}{
		{"stopped by SIGTERM", wire.ResultSignal, mk, inv, wire.ResultCancelled},
		{"trapped the stop and exited 1", wire.ResultExitCode, mk, inv, wire.ResultCancelled},
		{"runner stopped before its record was final", wire.ResultFailed, mk, inv, wire.ResultCancelled},
		{"timeout racing the stop", wire.ResultTimeout, mk, inv, wire.ResultCancelled},
		{"succeeded before the stop reached it", wire.ResultSuccess, mk, inv, wire.ResultSuccess},
		{"a platform error stays the platform's", wire.ResultPlatformError, mk, inv, wire.ResultPlatformError},
		{"overlap skip stays", wire.ResultOverlapSkipped, mk, inv, wire.ResultOverlapSkipped},
		{"no marker", wire.ResultSignal, nil, inv, wire.ResultSignal},
		{"a marker of another activation", wire.ResultSignal, mk, "ffff", wire.ResultSignal},
		{"no invocation id", wire.ResultSignal, &wire.CancelMarker{RunKey: key, At: at}, "", wire.ResultSignal},
		{"a marker of another run", wire.ResultSignal, &wire.CancelMarker{RunKey: "other", InvocationID: inv, At: at}, inv, wire.ResultSignal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := wire.Outcome{RunKey: key, Result: tc.result, FailureReason: "killed by SIGTERM"}
			got := Cancelled(in, tc.marker, tc.inv)
			if got.Result != tc.want {
				t.Fatalf("result %s, want %s", got.Result, tc.want)
			}
			if tc.want == wire.ResultCancelled && got.FailureReason != "cancelled on request at 2026-11-22T12:00:30Z" {
				t.Fatalf("reason %q", got.FailureReason)
			}
			if tc.want != wire.ResultCancelled && got != in {
				t.Fatalf("report changed: %+v", got)
			}
		})
	}
}

func TestReadCancelMarker(t *testing.T) {
	dir := t.TempDir()
	if mk, err := ReadCancelMarker(dir, "cron-a-b"); mk != nil || err != nil {
		t.Fatalf("no marker: got %+v, %v", mk, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cron-a-b.json"), []byte(`{"run_key":"k","invocation_id":"ab","at":"2026-11-22T12:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	mk, err := ReadCancelMarker(dir, "cron-a-b")
	if err != nil || mk == nil || mk.RunKey != "k" || mk.InvocationID != "ab" {
		t.Fatalf("got %+v, %v", mk, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cron-a-c.json"), []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCancelMarker(dir, "cron-a-c"); err == nil {
		t.Fatal("a torn marker read as fine")
	}
}
