package clockoffset

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMeasure(t *testing.T) {
	sent := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		rtt  time.Duration
		core time.Time
		want time.Duration
	}{
		{"in sync", 200 * time.Millisecond, sent, 400 * time.Millisecond}, // header 12:00:00 = 12:00:00.0–.999
		{"core ahead 5 s", 200 * time.Millisecond, sent.Add(5 * time.Second), 5400 * time.Millisecond},
		{"core behind 3 s", 1 * time.Second, sent.Add(-3 * time.Second), -3 * time.Second},
	} {
		got, err := Measure(sent, sent.Add(tt.rtt), tt.core.Format(http.TimeFormat))
		if err != nil || got != tt.want {
			t.Errorf("%s: %v %v, want %v", tt.name, got, err, tt.want)
		}
	}
	if _, err := Measure(sent, sent, "yesterday"); err == nil {
		t.Error("a bad Date header must be an error")
	}
}

func TestWriteReadWarn(t *testing.T) {
	dir := t.TempDir()
	r := Reading{OffsetSeconds: -2.5, MeasuredAt: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), Source: "announce"}
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil || got != r {
		t.Fatalf("read %+v %v", got, err)
	}
	if w := got.Warning(); !strings.Contains(w, "-2.5s") || strings.ContainsAny(w, "{[") {
		t.Errorf("warning %q", w)
	}
	if w := (Reading{OffsetSeconds: 1.9}).Warning(); w != "" {
		t.Errorf("warning under 2 s: %q", w)
	}
}

// The reading carries the boot id and CLOCK_BOOTTIME the runner ages it
// by; both come from this kernel.
func TestCurrentBoot(t *testing.T) {
	a, err := CurrentBoot()
	if err != nil {
		t.Skip(err) // no /proc
	}
	b, _ := CurrentBoot()
	if a.ID == "" || a.ID != b.ID || a.Time <= 0 || b.Time < a.Time {
		t.Fatalf("boots %+v then %+v", a, b)
	}
	dir := t.TempDir()
	r := Reading{OffsetSeconds: 0.3, MeasuredAt: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC), BootID: a.ID, Boottime: a.Time}
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(dir); err != nil || got != r {
		t.Fatalf("read %+v %v, want %+v", got, err, r)
	}
}
