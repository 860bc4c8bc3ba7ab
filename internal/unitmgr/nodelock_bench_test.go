package unitmgr

import (
	"context"
	"testing"
	"time"
)

// BenchmarkNodeLockTake is what the node's unit lock costs every apply,
// uncontended: the flock alone (as before tenures and the claim), and
// the whole take (turnstile, flock, tenure written, the claim looked
// at, and the daemon's memory) with its release.
func BenchmarkNodeLockTake(b *testing.B) {
	b.Run("flock-only", func(b *testing.B) {
		n := testLock(b.TempDir(), 0)
		for b.Loop() {
			f, err := openLockFile(n.path)
			if err != nil {
				b.Fatal(err)
			}
			if got, err := tryFlock(f); !got || err != nil {
				b.Fatal(got, err)
			}
			f.Close()
		}
	})
	b.Run("take", func(b *testing.B) {
		n := testLock(b.TempDir(), 30*time.Second)
		n.busy = &lockBusy{}
		ctx := context.Background()
		for b.Loop() {
			unlock, err := n.take(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			unlock()
		}
	})
}
