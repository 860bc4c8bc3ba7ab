package outcome

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/schedule"
	"github.com/hostcron/hostcron/internal/wire"
)

// tenantUID is the record owner in these tests: a non-root user when the
// tests run as root (they can then chown), else the current user.
func tenantUID(t *testing.T) int {
	if os.Getuid() == 0 {
		return 65534
	}
	return os.Getuid()
}

func chownTenant(t *testing.T, path string) {
	t.Helper()
	if os.Getuid() == 0 {
		if err := os.Lchown(path, tenantUID(t), -1); err != nil {
			t.Fatal(err)
		}
	}
}

func validRecord(now time.Time) (runner.Record, Expect) {
	sched, err := schedule.Parse("*/5 * * * *", "Europe/Berlin")
	if err != nil {
		panic(err)
	}
	slot := sched.Prev(now).UTC()
	started, finished := slot.Add(3*time.Second), slot.Add(10*time.Second)
	code := 1
	rec := runner.Record{Kind: runner.KindRan, RunKey: runkey.Scheduled(jobA, slot), Slot: slot, Version: 3,
		StartedAt: &started, FinishedAt: &finished, ExitCode: &code}
	return rec, Expect{JobID: jobA, UID: 1000, Specs: []KnownSpec{{Version: 3, Fires: sched.Matches}}, Now: now}
}

func TestSpecFor(t *testing.T) {
	specs := []KnownSpec{{Version: 7}, {Version: 2}, {Version: 5}} // current 7; kept 2 and 5
	for _, tt := range []struct {
		v    int64
		want int64 // 0: none
	}{{1, 2}, {2, 2}, {3, 5}, {5, 5}, {6, 7}, {7, 7}, {8, 0}} {
		got, ok := specFor(specs, tt.v)
		if (tt.want == 0) == ok || (ok && got.Version != tt.want) {
			t.Errorf("version %d: %+v %v, want %d", tt.v, got, ok, tt.want)
		}
	}
}

// A run that started under version 2 ("0 * * * *") reports after version
// 3 ("30 * * * *") replaced its spec: its slot is judged by the schedule
// it started under (the spec the agent kept), never by the newer one, and
// a record cannot borrow a schedule its version did not have.
func TestValidateAgainstTheRecordsVersion(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 40, 0, 0, time.UTC)
	hourly, _ := schedule.Parse("0 * * * *", "UTC")
	half, _ := schedule.Parse("30 * * * *", "UTC")
	specs := []KnownSpec{{Version: 3, Fires: half.Matches}, {Version: 2, Fires: hourly.Matches}}
	for _, tt := range []struct {
		name    string
		slot    time.Time
		version int64
		ok      bool
	}{
		{"old slot under the old version", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), 2, true},
		{"old slot under a version before the kept one", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), 1, true},
		{"new slot under the new version", time.Date(2026, 11, 21, 12, 30, 0, 0, time.UTC), 3, true},
		{"old slot claimed under the new version", time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), 3, false},
		{"new slot claimed under the old version", time.Date(2026, 11, 21, 12, 30, 0, 0, time.UTC), 2, false},
		{"version never issued", time.Date(2026, 11, 21, 12, 30, 0, 0, time.UTC), 4, false},
	} {
		code := 0
		rec := runner.Record{Kind: runner.KindRan, RunKey: runkey.Scheduled(jobA, tt.slot), Slot: tt.slot, Version: tt.version, ExitCode: &code}
		err := ValidateRecord(rec, Expect{JobID: jobA, UID: 1000, Specs: specs, Now: now})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadRecord)) {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestValidateRecord(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 7, 30, 0, time.UTC)
	tests := []struct {
		name string
		edit func(r *runner.Record)
		ok   bool
	}{
		{"valid", func(r *runner.Record) {}, true},
		{"manual run", func(r *runner.Record) { r.RunKey = runkey.Manual(jobA, "req-1"); r.Slot = now.Add(-time.Minute) }, true},
		{"unknown kind", func(r *runner.Record) { r.Kind = "pwned" }, false},
		{"trigger differs from key", func(r *runner.Record) { r.Trigger = "manual" }, false},
		{"catch-up of a scheduled key", func(r *runner.Record) { r.Trigger = "catchup" }, true},
		{"catch-up of a manual key", func(r *runner.Record) {
			r.RunKey = runkey.Manual(jobA, "req-1")
			r.Slot = now.Add(-time.Minute)
			r.Trigger = "catchup"
		}, false},
		{"backfill of a past slot", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-3 * 24 * time.Hour)
			r.RunKey = runkey.Backfill(jobA, r.Slot, "9")
			r.Trigger = "backfill"
		}, true},
		{"backfill a week and the run age back", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-wire.MaxBackfillAge - MaxRunAge + time.Hour)
			r.RunKey = runkey.Backfill(jobA, r.Slot, "9")
		}, true},
		{"backfill older than that", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-wire.MaxBackfillAge - MaxRunAge - time.Hour)
			r.RunKey = runkey.Backfill(jobA, r.Slot, "9")
		}, false},
		{"backfill slot differs from its key", func(r *runner.Record) {
			r.RunKey = runkey.Backfill(jobA, r.Slot.Add(-24*time.Hour), "9")
		}, false},
		{"backfill saying catchup", func(r *runner.Record) {
			r.RunKey = runkey.Backfill(jobA, r.Slot, "9")
			r.Trigger = "catchup"
		}, false},
		{"scheduled key saying backfill", func(r *runner.Record) { r.Trigger = "backfill" }, false},
		{"retry of the slot", func(r *runner.Record) {
			r.RunKey = runkey.Retry(jobA, r.Slot, 2)
			r.Trigger = "retry"
		}, true},
		{"retry of another slot", func(r *runner.Record) { r.RunKey = runkey.Retry(jobA, r.Slot.Add(-5*time.Minute), 2) }, false},
		{"retry of no fire time", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-time.Minute)
			r.RunKey = runkey.Retry(jobA, r.Slot, 2)
		}, false},
		{"retry saying catchup", func(r *runner.Record) {
			r.RunKey = runkey.Retry(jobA, r.Slot, 2)
			r.Trigger = "catchup"
		}, false},
		{"NUL in warning", func(r *runner.Record) { r.Warning = "a\x00b" }, false},
		{"another job's key", func(r *runner.Record) { r.RunKey = runkey.Scheduled(jobB, r.Slot) }, false},
		{"key slot differs", func(r *runner.Record) { r.Slot = r.Slot.Add(-5 * time.Minute) }, false},
		{"not a fire time", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-time.Minute)
			r.RunKey = runkey.Scheduled(jobA, r.Slot)
		}, false},
		{"slot in the future", func(r *runner.Record) {
			r.Slot = r.Slot.Add(time.Hour)
			r.RunKey = runkey.Scheduled(jobA, r.Slot)
		}, false},
		{"slot long ago", func(r *runner.Record) {
			r.Slot = r.Slot.Add(-30 * 24 * time.Hour)
			r.RunKey = runkey.Scheduled(jobA, r.Slot)
		}, false},
		{"version above spec", func(r *runner.Record) { r.Version = 4 }, false},
		{"version zero", func(r *runner.Record) { r.Version = 0 }, false},
		{"exit code 256", func(r *runner.Record) { c := 256; r.ExitCode = &c }, false},
		{"exit code -1", func(r *runner.Record) { c := -1; r.ExitCode = &c }, false},
		{"unknown signal", func(r *runner.Record) { r.Signal = "SIGPWNED\x00" }, false},
		{"known signal", func(r *runner.Record) { r.Signal = "SIGKILL" }, true},
		{"huge reason", func(r *runner.Record) { r.Reason = strings.Repeat("x", 5000) }, false},
		{"invalid utf-8 reason", func(r *runner.Record) { r.Reason = "\xff\xfe" }, false},
		{"finish before start", func(r *runner.Record) { f := r.StartedAt.Add(-time.Second); r.FinishedAt = &f }, false},
		{"finish in the future", func(r *runner.Record) { f := now.Add(time.Hour); r.FinishedAt = &f }, false},
	}
	for _, tt := range tests {
		rec, want := validRecord(now)
		tt.edit(&rec)
		err := ValidateRecord(rec, want)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadRecord) && !errors.Is(err, ErrBadDetails) {
			t.Errorf("%s: error is neither ErrBadRecord nor ErrBadDetails: %v", tt.name, err)
		}
	}
}

// TestReadRecordAttacks: what a tenant can put at record.json never
// hangs the hook, never makes it read a root-only file, and never passes.
func TestReadRecordAttacks(t *testing.T) {
	now := time.Now()
	rec, want := validRecord(now)
	want.UID = tenantUID(t)
	good, _ := json.Marshal(rec)
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, good, 0o600); err != nil { // root-only, and even a valid record
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
		ok    bool
	}{
		{"valid", func(t *testing.T, p string) { writeOwned(t, p, good) }, true},
		{"missing", func(t *testing.T, p string) {}, false},
		{"symlink to a root file", func(t *testing.T, p string) {
			if err := os.Symlink(secret, p); err != nil {
				t.Fatal(err)
			}
			chownTenant(t, p)
		}, false},
		{"fifo", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			chownTenant(t, p)
		}, false},
		{"directory", func(t *testing.T, p string) {
			_ = os.Mkdir(p, 0o755)
			chownTenant(t, p)
		}, false},
		{"too large", func(t *testing.T, p string) { writeOwned(t, p, append(good, make([]byte, MaxRecordSize)...)) }, false},
		{"owned by someone else", func(t *testing.T, p string) {
			if err := os.WriteFile(p, good, 0o644); err != nil {
				t.Fatal(err)
			}
			if os.Getuid() == 0 {
				_ = os.Chown(p, 0, 0)
			} else {
				want.UID++ // the file is ours, the expected owner is not
				t.Cleanup(func() { want.UID-- })
			}
		}, false},
		{"hard link", func(t *testing.T, p string) {
			writeOwned(t, p+".orig", good)
			if err := os.Link(p+".orig", p); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"not json", func(t *testing.T, p string) { writeOwned(t, p, []byte("{\"kind\":")) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.plant(t, filepath.Join(dir, runner.RecordFile))
			done := make(chan error, 1)
			go func() { _, err := ReadRecord(dir, want); done <- err }()
			select {
			case err := <-done:
				if (err == nil) != tt.ok {
					t.Errorf("err = %v, want ok=%v", err, tt.ok)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("ReadRecord hung")
			}
		})
	}
}

func writeOwned(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	chownTenant(t, path)
}

func TestCheckRecordFileRefusesRootOwner(t *testing.T) {
	if err := checkRecordFile(syscall.S_IFREG, 0, 1, 10, 0); err == nil {
		t.Error("accepted a record with expected uid 0")
	}
}

// TestBadDetailsFallBackToSystemd: a record whose run checks out but whose
// account of it does not yields only the run's identity, so the hook
// reports what systemd saw; a forged run key yields nothing at all.
func TestBadDetailsFallBackToSystemd(t *testing.T) {
	now := time.Now()
	rec, want := validRecord(now)
	want.UID = tenantUID(t)
	code := 0
	rec.ExitCode, rec.Signal, rec.Kind = &code, "SIGNOPE", runner.KindRan
	dir := t.TempDir()
	b, _ := json.Marshal(rec)
	writeOwned(t, filepath.Join(dir, runner.RecordFile), b)
	got, err := ReadRecord(dir, want)
	if !errors.Is(err, ErrBadDetails) || got.RunKey != rec.RunKey || got.Kind != "" || got.ExitCode != nil || got.Signal != "" {
		t.Fatalf("bad details: %+v, %v", got, err)
	}
	r, silent := Classify(Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "3"}, got, false, now)
	if silent || r.RunKey != rec.RunKey || r.Result == wire.ResultSuccess {
		t.Errorf("classified %+v", r)
	}

	rec.Signal, rec.RunKey = "", runkey.Scheduled(jobB, rec.Slot) // another job's run
	b, _ = json.Marshal(rec)
	writeOwned(t, filepath.Join(dir, runner.RecordFile), b)
	if got, err := ReadRecord(dir, want); !errors.Is(err, ErrBadRecord) || got.RunKey != "" {
		t.Errorf("forged key: %+v, %v", got, err)
	}
}

// TestRuntimeDirOwner: the record's owner is the runtime directory's
// owner; a root-owned directory or a symlink in its place names nobody.
func TestRuntimeDirOwner(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to chown")
	}
	base := t.TempDir()
	dir := filepath.Join(base, "cron-acme-x")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RuntimeDirOwner(dir, ""); err == nil {
		t.Error("accepted a root-owned runtime dir")
	}
	chownTenant(t, dir)
	if uid, err := RuntimeDirOwner(dir, ""); err != nil || uid != tenantUID(t) {
		t.Errorf("owner %d, %v", uid, err)
	}
	if _, err := RuntimeDirOwner(dir, "root"); err != nil {
		t.Errorf("USER=root (a full-privilege hook) refused: %v", err)
	}
	if _, err := RuntimeDirOwner(dir, "daemon"); err == nil {
		t.Error("accepted a dir whose owner is not $USER")
	}
	link := filepath.Join(base, "link")
	_ = os.Symlink(dir, link)
	if _, err := RuntimeDirOwner(link, ""); err == nil {
		t.Error("followed a symlink")
	}
}

// ValidateRecord checks every value of a decoded record against what the
// hook knows. It is pure.
func ValidateRecord(r runner.Record, want Expect) error {
	if err := validateIdentity(r, want); err != nil {
		return err
	}
	return validateDetails(r, want)
}
