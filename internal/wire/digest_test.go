package wire

import (
	"testing"
	"time"
)

func TestSetDigest(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	a := Job{ID: "00000000-0000-4000-8000-000000000001", Tenant: "t1", Version: 3, Rev: 900, Enabled: true, NotBefore: at,
		User: "u", Group: "g", Webroot: "/w", WebStorageDir: "/s", Schedule: "* * * * *", Timezone: "UTC", Command: "true",
		Environment: map[string]string{"A": "1", "B": "2"}}
	b := a
	b.ID = "00000000-0000-4000-8000-000000000002"
	base := SetDigest([]Job{a, b})
	if got := SetDigest([]Job{b, a}); got != base {
		t.Errorf("order changed the digest: %s vs %s", got, base)
	}
	local := a
	local.NotBefore = at.In(time.FixedZone("x", 3600))
	if got := SetDigest([]Job{local, b}); got == base {
		t.Errorf("the same instant with another offset, which a spec keeps, left the digest as it was")
	}
	if SetDigest(nil) == base || SetDigest([]Job{a}) == base {
		t.Errorf("a set with fewer jobs digests like the whole")
	}
	for name, change := range map[string]func(*Job){
		"version":     func(j *Job) { j.Version++ },
		"rev":         func(j *Job) { j.Rev++ },
		"enabled":     func(j *Job) { j.Enabled = false },
		"not before":  func(j *Job) { j.NotBefore = j.NotBefore.Add(time.Nanosecond) },
		"user":        func(j *Job) { j.User = "v" },
		"webroot":     func(j *Job) { j.Webroot = "/x" },
		"storage":     func(j *Job) { j.WebStorageDir = "/t" },
		"schedule":    func(j *Job) { j.Schedule = "0 * * * *" },
		"command":     func(j *Job) { j.Command = "false" },
		"environment": func(j *Job) { j.Environment = map[string]string{"A": "1", "B": "3"} },
		"overlap":     func(j *Job) { j.OverlapPolicy = "queue" },
		"tenant":      func(j *Job) { j.Tenant = "t2" },
	} {
		c := a
		change(&c)
		if SetDigest([]Job{c, b}) == base {
			t.Errorf("changing the %s left the digest as it was", name)
		}
	}
}
