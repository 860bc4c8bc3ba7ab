//go:build e2e

package harness

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

// A tier's nodes, mounts, firewall rules and private servers outlive the
// test binary unless Stop runs, and neither a signal (CI cancelling the
// job, ^C) nor go test's -timeout (a panic in testing's own goroutine)
// runs deferred calls. Every started cluster is kept here so both can tear
// it down first.
var live = struct {
	sync.Mutex
	clusters map[*Cluster]bool
	watching bool
}{clusters: map[*Cluster]bool{}}

// track keeps c for the teardown on a signal, watching for signals from
// the first cluster on.
func track(c *Cluster) {
	live.Lock()
	defer live.Unlock()
	live.clusters[c] = true
	if !live.watching {
		live.watching = true
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			sig := <-sigs
			// A second signal kills at once, should the teardown hang.
			signal.Reset(syscall.SIGINT, syscall.SIGTERM)
			tearDownAll(fmt.Sprintf("%v received (a second one kills without teardown)", sig))
		}()
	}
}

func untrack(c *Cluster) {
	live.Lock()
	defer live.Unlock()
	delete(live.clusters, c)
}

// tearDownAll stops every live cluster and exits the test binary failed.
// A test still running may fail meanwhile; its nodes are going away.
func tearDownAll(why string) {
	fmt.Fprintf(os.Stderr, "harness: %s: tearing down every cluster before exiting\n", why)
	live.Lock()
	var cs []*Cluster
	for c := range live.clusters {
		cs = append(cs, c)
	}
	live.Unlock()
	for _, c := range cs {
		c.Stop()
	}
	os.Exit(1)
}

// TearDownBeforeTimeout arranges for the tier's clusters to be stopped
// shortly before go test's -timeout would kill the binary (testing starts
// that alarm in m.Run, so call this right before m.Run). The goroutines
// are dumped first, as testing's own timeout would, to show what hung.
func TearDownBeforeTimeout(tier string) {
	if !flag.Parsed() {
		flag.Parse() // testing's flags, -test.timeout among them
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	timeout, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || timeout <= 0 {
		return
	}
	margin := min(2*time.Minute, timeout/10)
	time.AfterFunc(timeout-margin, func() {
		fmt.Fprintf(os.Stderr, "harness: %s: the test timeout (%s) is %s away; goroutines:\n", tier, timeout, margin)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		tearDownAll(tier + " timed out")
	})
}
