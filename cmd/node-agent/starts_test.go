package main

import (
	"testing"

	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestStartsToReport(t *testing.T) {
	run := func(inv string) unitmgr.Started { return unitmgr.Started{RunStart: wire.RunStart{InvocationID: inv}} }
	post, keep := startsToReport([]unitmgr.Started{run("a"), run("b")}, map[string]bool{"a": true, "gone": true})
	if len(post) != 1 || post[0].InvocationID != "b" {
		t.Errorf("post %v, want only the run not reported yet", post)
	}
	if !keep["a"] || keep["gone"] || keep["b"] {
		t.Errorf("kept %v, want the reported run still running only (b is kept once its post succeeds)", keep)
	}
	if post, keep := startsToReport(nil, keep); len(post) != 0 || len(keep) != 0 {
		t.Errorf("nothing running: post %v keep %v", post, keep)
	}
}
