package main

import (
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/clockoffset"
)

// The runner reports nothing for the slots it refuses on a clock more than
// MaxSkew off (runner.KindClockRefused), so the agent says it, every
// measurement and in `node-agent state`.
func TestClockRefusal(t *testing.T) {
	if got := clockRefusal(clockoffset.Reading{OffsetSeconds: -660}); !strings.Contains(got, "-11m0s") || !strings.Contains(got, "refuses every run") {
		t.Errorf("11 minutes fast: %q", got)
	}
	if got := clockRefusal(clockoffset.Reading{OffsetSeconds: 90}); got != "" {
		t.Errorf("90 s slow: %q", got)
	}
}
