package outcome

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

// TestHostileOutputTail: the tenant can rewrite the record's tail and
// counts; the report carries a tail the core accepts (at most 4 KiB of
// UTF-8 without NUL, the record's last bytes) and counts in bounds, and
// the rest of the record still counts.
func TestHostileOutputTail(t *testing.T) {
	now := time.Now()
	rec, want := validRecord(now)
	want.UID = tenantUID(t)
	base, _ := json.Marshal(rec)
	// Raw invalid bytes, NUL escapes and lone surrogates, 40 KiB of them,
	// ending with a line the tail must keep.
	hostile := strings.Repeat(`x\u0000\ud800`+"\xff\xfe", 4<<10) + `\nlast words\n`
	for _, tt := range []struct {
		name      string
		fields    string
		wantTail  string
		truncated bool
		dropped   int64
	}{
		// Cut from a 40 KiB line: the tail starts at the next whole line.
		{"huge tail of bad bytes", `"output_tail":"` + hostile + `"`, "last words\n", false, 0},
		{"NUL and bad bytes in a short tail", `"output_tail":"a\u0000b` + "\xff" + `\n"`, "a\uFFFDb\uFFFD\n", false, 0},
		{"negative drop count", `"output_tail":"ok\n","output_dropped_bytes":-5`, "ok\n", false, 0},
		{"huge drop count", `"output_tail":"ok\n","output_dropped_bytes":9223372036854775807`, "ok\n", true, wire.MaxOutputDroppedBytes},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := append(bytes.TrimSuffix(base, []byte("}")), []byte(","+tt.fields+"}")...)
			if len(b) > MaxRecordSize {
				t.Fatalf("test record of %d bytes is over MaxRecordSize", len(b))
			}
			dir := t.TempDir()
			writeOwned(t, filepath.Join(dir, runner.RecordFile), b)
			got, err := ReadRecord(dir, want)
			if err != nil {
				t.Fatalf("record refused: %v", err)
			}
			r, silent := Classify(Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}, got, true, now)
			if silent || r.Result != wire.ResultExitCode {
				t.Fatalf("classified %+v", r)
			}
			if r.OutputTail == nil || !wire.ValidOutputTail(*r.OutputTail) || *r.OutputTail != tt.wantTail {
				t.Fatalf("tail %.60q: want %q (at most %d bytes of UTF-8 without NUL)", derefOr(r.OutputTail), tt.wantTail, wire.MaxOutputTail)
			}
			if r.OutputTruncated != tt.truncated || r.OutputDroppedBytes != tt.dropped {
				t.Errorf("truncated %v dropped %d, want %v %d", r.OutputTruncated, r.OutputDroppedBytes, tt.truncated, tt.dropped)
			}
		})
	}
}

// TestOutputOnlyOfAFinishedCommand: a record of no finished command (or
// from a runner before the tail) reports no tail, so the run's output_tail
// stays null rather than claiming an empty output.
func TestOutputOnlyOfAFinishedCommand(t *testing.T) {
	now := time.Now()
	rec, _ := validRecord(now)
	tail := "boom\n"
	for name, r := range map[string]runner.Record{
		"old runner":   rec,
		"overlap skip": {Kind: runner.KindOverlap, RunKey: rec.RunKey, Slot: rec.Slot, OutputTail: &tail},
		"not finished": {Kind: runner.KindRan, RunKey: rec.RunKey, Slot: rec.Slot, StartedAt: rec.StartedAt, OutputTail: &tail},
	} {
		if tail, _, _ := outputOf(r); tail != nil {
			t.Errorf("%s: tail %q, want none", name, *tail)
		}
	}
	rec.OutputTail = &tail
	if got, truncated, _ := outputOf(rec); got == nil || *got != tail || truncated {
		t.Errorf("finished run: tail %v truncated %v", got, truncated)
	}
}

func derefOr(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// TestLargestRunnerRecordFits: the largest record the runner writes (a
// full tail of bytes JSON escapes six-fold, reason and warning at their
// bounds) is under MaxRecordSize, so a tail never gets a record refused.
func TestLargestRunnerRecordFits(t *testing.T) {
	rec, _ := validRecord(time.Now())
	tail := strings.Repeat("\x01", wire.MaxOutputTail)
	rec.OutputTail, rec.OutputTruncated, rec.OutputDroppedBytes = &tail, true, wire.MaxOutputDroppedBytes
	rec.Reason, rec.Warning, rec.Node = strings.Repeat("\x01", MaxReason), strings.Repeat("\x01", MaxReason), strings.Repeat("n", 255)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxRecordSize {
		t.Errorf("the largest record is %d bytes, over MaxRecordSize %d", len(b), MaxRecordSize)
	}
}

// TestSpooledTailJSONIsBounded: whatever bytes the command wrote, its tail
// takes at most twice its 4 KiB in a report's JSON (as sent and as
// spooled): a tenant cannot make the node's outcome spool grow six-fold
// with control characters or '<'.
func TestSpooledTailJSONIsBounded(t *testing.T) {
	var worst []string
	for b := range 256 {
		worst = append(worst, string([]byte{byte(b)}))
	}
	worst = append(worst, "\u0080", "\u009f", "\u2028", "\u2029", "\uFFFD", "\U0010FFFF")
	empty := ""
	base, err := marshal(Spooled{JobID: "j", Report: wire.Outcome{OutputTail: &empty}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range worst {
		tail := wire.OutputTail([]byte(strings.Repeat(w, 2*wire.MaxOutputTail)), false)
		if !wire.ValidOutputTail(tail) {
			t.Errorf("tail of %q: the API would refuse it", w)
		}
		b, err := marshal(Spooled{JobID: "j", Report: wire.Outcome{OutputTail: &tail}})
		if err != nil {
			t.Fatal(err)
		}
		if grown := len(b) - len(base); grown > 2*wire.MaxOutputTail {
			t.Errorf("a tail of %q takes %d bytes of JSON, over %d", w, grown, 2*wire.MaxOutputTail)
		}
	}
}
