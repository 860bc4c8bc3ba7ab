package outcome

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 30, 0, time.UTC)
	slot := now.Add(-25 * time.Second)
	started := slot.Add(3 * time.Second)
	one, seventyFive := 1, 75
	ran := func(code *int, sig string) runner.Record {
		return runner.Record{Kind: runner.KindRan, RunKey: "k", Slot: slot, StartedAt: &started, ExitCode: code, Signal: sig}
	}
	tests := []struct {
		name       string
		svc        Service
		rec        runner.Record
		haveRecord bool
		want       wire.Result // "" = silent
	}{
		{"success", Service{Result: "success", ExitStatus: "0"}, ran(new(int), ""), true, "success"},
		{"contention", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindContention}, true, ""},
		{"skip without record", Service{Result: "success", ExitStatus: "75"}, runner.Record{RunKey: "k"}, false, ""},
		{"overlap", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindOverlap, RunKey: "k", Slot: slot}, true, "overlap_skipped"},
		{"exit code", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}, ran(&one, ""), true, "exit_code"},
		{"own 75", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}, ran(&seventyFive, ""), true, "exit_code"},
		{"signal in command", Service{Result: "exit-code", ExitStatus: "137"}, ran(nil, "SIGKILL"), true, "signal"},
		{"runner killed", Service{Result: "signal", ExitCode: "killed", ExitStatus: "TERM"}, ran(nil, ""), true, "signal"},
		{"timeout", Service{Result: "timeout", ExitCode: "killed", ExitStatus: "TERM"}, ran(nil, ""), true, "timeout"},
		{"oom by systemd", Service{Result: "oom-kill", ExitCode: "killed", ExitStatus: "KILL"}, ran(nil, "SIGKILL"), true, "oom"},
		{"oom by cgroup counter", Service{Result: "exit-code", ExitStatus: "137", OOMKills: 1}, ran(nil, "SIGKILL"), true, "oom"},
		{"setup error", Service{Result: "exit-code", ExitStatus: "1"}, runner.Record{Kind: runner.KindSetupError, RunKey: "k", Slot: slot, Reason: "lock dir missing"}, true, "failed"},
		{"late fire", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindLateFire, RunKey: "k", Slot: slot}, true, ""},
		{"slot before not-before", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindNotBefore, RunKey: "k", Slot: slot}, true, ""},
		{"overlap another node reports", Service{Result: "success", ExitStatus: "75"}, runner.Record{Kind: runner.KindOverlapSeen, RunKey: "k", Slot: slot}, true, ""},
		{"shared storage failed", Service{Result: "exit-code", ExitStatus: "1"}, runner.Record{Kind: runner.KindPlatformError, RunKey: "k", Slot: slot, Reason: "node n1: lock dir missing"}, true, "platform_error"},
		// The mount hung until the unit's timeout: the record never reached "ran".
		{"hung before the command", Service{Result: "timeout", ExitCode: "killed", ExitStatus: "TERM"}, runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot, Node: "n1"}, true, "platform_error"},
		{"runner died before the command", Service{Result: "signal", ExitCode: "killed", ExitStatus: "KILL"}, runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot}, true, "platform_error"},
		{"no record, unit never started", Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "243"}, runner.Record{RunKey: "k", Slot: slot}, false, "failed"},
	}
	for _, tt := range tests {
		r, silent := Classify(tt.svc, tt.rec, tt.haveRecord, now)
		got := r.Result
		if silent {
			got = ""
		}
		if got != tt.want {
			t.Errorf("%s: got %q, want %q (%+v)", tt.name, got, tt.want, r)
		}
		if !silent && (r.RunKey != "k" || !r.ScheduledAt.Equal(slot)) {
			t.Errorf("%s: run key/slot lost: %+v", tt.name, r)
		}
	}
	hung := runner.Record{Kind: runner.KindStarted, RunKey: "k", Slot: slot, Node: "n1"}
	if r, _ := Classify(Service{Result: "timeout"}, hung, true, now); r.FailureReason != "node n1: timed out before the command started (shared storage hung?)" {
		t.Errorf("hung report %+v: want the node and the cause", r)
	}
	if r, _ := Classify(Service{Result: "exit-code"}, ran(&seventyFive, ""), true, now); *r.ExitCode != 75 || r.FinishedAt == nil {
		t.Errorf("own 75 report %+v", r)
	}
}

// TestSpoolAndRedeliver: reports spooled while the API is down arrive once
// it answers, oldest first, and each exactly once.
func TestSpoolAndRedeliver(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "who", http.StatusUnauthorized)
			return
		}
		var rep wire.Outcome
		_ = json.NewDecoder(r.Body).Decode(&rep)
		if rep.Result == "bogus" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		got = append(got, rep.RunKey)
	}))
	defer srv.Close()
	c := Client{BaseURL: srv.URL, Credential: "secret"}
	dir := t.TempDir()
	for i, key := range []string{"a", "b", "bad", "c"} {
		res := wire.ResultSuccess
		if key == "bad" {
			res = "bogus"
		}
		if err := c.Post(context.Background(), "job", wire.Outcome{RunKey: key, Result: res}); err == nil {
			t.Fatal("post succeeded while the API is down")
		}
		if err := Spool(dir, "job", wire.Outcome{RunKey: key, Result: res}); err != nil {
			t.Fatal(err)
		}
		// distinct mtimes so the order is defined
		past := time.Now().Add(time.Duration(i-10) * time.Second)
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if info, _ := e.Info(); info.ModTime().After(past.Add(500 * time.Millisecond)) {
				_ = os.Chtimes(dir+"/"+e.Name(), past, past)
			}
		}
	}
	_ = Spool(dir, "job", wire.Outcome{RunKey: "a", Result: "success"}) // same run key: one copy
	if n, err := Redeliver(context.Background(), c, dir); err == nil || n != 0 {
		t.Fatalf("redeliver while down: %d, %v", n, err)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	n, err := Redeliver(context.Background(), c, dir)
	if err != nil || n != 3 {
		t.Fatalf("redeliver: %d, %v", n, err)
	}
	// "a" was spooled again last, so it is now the newest.
	if len(got) != 3 || got[0] != "b" || got[1] != "c" || got[2] != "a" {
		t.Errorf("delivered %v", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("%d files left in the spool", len(entries))
	}
}
