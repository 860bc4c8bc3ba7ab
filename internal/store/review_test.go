package store

import (
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

// A node whose shared-storage mount is broken (lock dir missing, EIO, a
// hung mount until the timeout) reports platform_error for every slot at
// once, before the healthy node that won the lock has finished the same
// slot. The healthy node's real result then arrives second and is dropped
// as a duplicate: the run happened, its outcome is hidden, and failures
// never count. A real result from the node that ran the slot should
// replace another node's platform error.
func TestRealResultReplacesAnotherNodesPlatformError(t *testing.T) {
	plat := wire.ResultPlatformError
	if got := decideRecord(&plat, wire.ResultSuccess); got != replaceRun {
		t.Fatalf("success after another node's platform_error: step %d, want replace", got)
	}
}
