package jobspec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestNeedsKeeping(t *testing.T) {
	old := Spec{ID: "j", Version: 3, Schedule: "0 * * * *", Timezone: "UTC", Command: "a"}
	edit := func(f func(s *Spec)) *Spec { s := old; s.Version++; f(&s); return &s }
	for _, tt := range []struct {
		name string
		next *Spec
		keep bool
	}{
		{"removed", nil, true},
		{"schedule changed", edit(func(s *Spec) { s.Schedule = "30 * * * *" }), true},
		{"time zone changed", edit(func(s *Spec) { s.Timezone = "Europe/Berlin" }), true},
		{"command changed: the successor judges the same slots", edit(func(s *Spec) { s.Command = "b" }), false},
		{"disabled or re-enabled (not_before): same slots", edit(func(s *Spec) { s.NotBefore = time.Unix(1, 0) }), false},
		// A cancel_previous run still going stops at the next slot: the
		// hook must judge its superseded_by by its own policy.
		{"overlap_policy changed", edit(func(s *Spec) { s.OverlapPolicy = wire.OverlapCancelPrevious }), true},
		{"overlap_policy spelled out, same policy", edit(func(s *Spec) { s.OverlapPolicy = wire.OverlapSkip }), false},
	} {
		if got := NeedsKeeping(old, tt.next); got != tt.keep {
			t.Errorf("%s: keep %v, want %v", tt.name, got, tt.keep)
		}
	}
}

func TestExpired(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	var files []keptFile
	for v := int64(1); v <= MaxPrevious+2; v++ { // unit a: two too many
		files = append(files, keptFile{Name: KeptName("a", v), Unit: "a", Version: v, ModTime: now.Add(-time.Hour)})
	}
	files = append(files,
		keptFile{Name: KeptName("b", 7), Unit: "b", Version: 7, ModTime: now.Add(-KeepPrevious - time.Second)}, // too old
		keptFile{Name: KeptName("b", 8), Unit: "b", Version: 8, ModTime: now.Add(-KeepPrevious)},               // just kept
	)
	got := expired(files, now)
	want := []string{KeptName("a", 1), KeptName("a", 2), KeptName("b", 7)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("expired %v, want %v", got, want)
	}
}

// The agent keeps the spec a schedule change or a delete replaces, under
// its version, and drops kept specs past their time.
func TestKeepReplaced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cron-acme-j.json")
	now := time.Now() // kept specs age by their files' times
	write := func(s Spec) []byte {
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	v1 := Spec{ID: "j", Version: 1, Schedule: "0 * * * *", Timezone: "UTC", Command: "true"}
	v2, v3 := v1, v1
	v2.Version, v2.Command = 2, "false"                                  // command only
	v3.Version, v3.Schedule = 3, "30 * * * *"                            // schedule
	if err := KeepReplaced(path, "cron-acme-j", write(v1)); err != nil { // nothing there yet
		t.Fatal(err)
	}
	for _, step := range []struct {
		cur, next Spec
	}{{v1, v2}, {v2, v3}} {
		if err := os.WriteFile(path, write(step.cur), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := KeepReplaced(path, "cron-acme-j", write(step.next)); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := Kept(dir, "cron-acme-j")
	if err != nil || len(kept) != 1 || filepath.Base(kept[0]) != "cron-acme-j.v2.json" {
		t.Fatalf("kept %v (%v): want only v2, the spec the schedule change replaced", kept, err)
	}
	if s, err := Read(kept[0]); err != nil || s.Schedule != v1.Schedule || s.Version != 2 {
		t.Fatalf("kept spec %+v %v", s, err)
	}
	if fi, err := os.Stat(kept[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kept spec mode %v %v: want root-only 0600", fi.Mode(), err)
	}
	// A delete keeps the last spec; a later PruneKept drops what is too old.
	if err := os.WriteFile(path, write(v3), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := KeepReplaced(path, "cron-acme-j", nil); err != nil {
		t.Fatal(err)
	}
	long := now.Add(-KeepPrevious - time.Second)
	if err := os.Chtimes(kept[0], long, long); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "cron-acme-k.json")
	if err := os.WriteFile(other, write(Spec{ID: "k", Version: 1, Schedule: "* * * * *"}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := KeepReplaced(other, "cron-acme-k", nil); err != nil {
		t.Fatal(err)
	}
	names := func() string {
		entries, _ := os.ReadDir(filepath.Join(dir, PreviousDir))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return fmt.Sprint(names)
	}
	// Keeping does not prune (a batch prunes once, after its keeps).
	if want := fmt.Sprint([]string{"cron-acme-j.v2.json", "cron-acme-j.v3.json", "cron-acme-k.v1.json"}); names() != want {
		t.Fatalf("kept %v before the prune, want %s", names(), want)
	}
	if err := PruneKept(dir, now); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint([]string{"cron-acme-j.v3.json", "cron-acme-k.v1.json"}); names() != want {
		t.Fatalf("kept %v, want %s (v2 older than %s)", names(), want, KeepPrevious)
	}
}

// TestKeepReplacedDropsEnvironment: the spec kept after a delete or a
// schedule change serves the outcome hook only, so the job's environment
// (its secrets) is not kept with it (review: they stayed on every node of
// the shard for KeepPrevious after the job was gone).
func TestKeepReplacedDropsEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cron-acme-j.json")
	s := Spec{ID: "j", Version: 4, Schedule: "0 * * * *", Timezone: "UTC", Command: "true",
		Environment: map[string]string{"DB_PASSWORD": "s3cr3t-sentinel"}}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := KeepReplaced(path, "cron-acme-j", nil); err != nil {
		t.Fatal(err)
	}
	kept, err := Kept(dir, "cron-acme-j")
	if err != nil || len(kept) != 1 {
		t.Fatalf("kept %v (%v), want the deleted job's spec", kept, err)
	}
	raw, err := os.ReadFile(kept[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(kept[0])
	if err != nil || got.Version != 4 || got.Schedule != s.Schedule || len(got.Environment) != 0 || strings.Contains(string(raw), "s3cr3t-sentinel") {
		t.Errorf("kept spec %+v (%v):\n%s\nwant version and schedule, no environment", got, err, raw)
	}
}
