package main

import (
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/unitmgr"
)

func TestPrintPlan(t *testing.T) {
	var b strings.Builder
	p := unitmgr.Plan{
		Steps: []unitmgr.Step{
			{Kind: unitmgr.KindWrite, Unit: "cron-a-1", Target: "/etc/systemd/system/cron-a-1.timer", Reason: "changed: OnCalendar"},
			{Kind: unitmgr.KindReload, Reason: "unit files changed"},
		},
		Failed: []string{"cron-a-2: bad schedule"},
		Kept:   []string{"cron-a-3"},
	}
	if err := printPlan(&b, p); err != nil {
		t.Fatal(err)
	}
	want := "write    /etc/systemd/system/cron-a-1.timer — changed: OnCalendar\n" +
		"reload — unit files changed\n" +
		"failed   cron-a-2: bad schedule\n" +
		"kept     cron-a-3 — the node has a newer version\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := printPlan(&b, unitmgr.Plan{}); err != nil || b.String() != "no changes\n" {
		t.Errorf("empty plan printed %q, %v", b.String(), err)
	}
}
