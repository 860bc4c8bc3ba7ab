package trust

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

const jobID = "0b7c6a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21"

var ids = map[string]uint32{"acme": 1001, "www-data": 33, "root": 0, "docker": 1500, "sudo": 27, "lowuser": 999, "floor": 1000}

func lookup(name string) (uint32, error) {
	if id, ok := ids[name]; ok {
		return id, nil
	}
	return 0, fmt.Errorf("unknown %q", name)
}

// memberships: the groups a user is in (primary and supplementary), as
// systemd's initgroups() gives them to the service.
var memberships = map[string][]string{"acme": {"acme", "users"}, "floor": {"floor"}, "lowuser": {"lowuser"},
	"sneaky": {"sneaky", "users", "systemd-journal"}, "rooty": {"rooty", "root"}}

func groupsOf(name string) ([]string, error) {
	if g, ok := memberships[name]; ok {
		return g, nil
	}
	return nil, fmt.Errorf("unknown %q", name)
}

func init() {
	ids["users"], ids["systemd-journal"], ids["sneaky"], ids["rooty"] = 100, 1400, 1002, 1003
}

func goodJob() wire.Job {
	return wire.Job{ID: jobID, Tenant: "acme", User: "acme", Group: "acme",
		Webroot: "/srv/shared/www/acme/public", WebStorageDir: "/srv/shared/www"}
}

func TestAdmit(t *testing.T) {
	pol := Policy{StorageDir: "/srv/shared/www", LookupUID: lookup, LookupGID: lookup, LookupGroups: groupsOf}
	cases := []struct {
		name string
		edit func(*wire.Job)
		pol  func(*Policy)
		ok   bool
	}{
		{"tenant job", func(*wire.Job) {}, nil, true},
		{"webroot is the tenant dir", func(j *wire.Job) { j.Webroot = "/srv/shared/www/acme" }, nil, true},
		{"uid at the floor", func(j *wire.Job) { j.User = "floor" }, nil, true},
		{"root user", func(j *wire.Job) { j.User = "root" }, nil, false},
		{"root group", func(j *wire.Job) { j.Group = "root" }, nil, false},
		{"root even with floor lowered", func(j *wire.Job) { j.User = "root" }, func(p *Policy) { p.MinUID = 1; p.Denied = []string{} }, false},
		{"uid below floor", func(j *wire.Job) { j.User = "www-data" }, nil, false},
		{"uid 999", func(j *wire.Job) { j.User = "lowuser" }, nil, false},
		{"docker group above floor, denied by name", func(j *wire.Job) { j.Group = "docker" }, nil, false},
		{"sudo group", func(j *wire.Job) { j.Group = "sudo" }, nil, false},
		{"unknown user", func(j *wire.Job) { j.User = "ghost" }, nil, false},
		{"user name with a newline", func(j *wire.Job) { j.User = "acme\nUser=root" }, nil, false},
		{"configurable floor", func(j *wire.Job) { j.User = "lowuser" }, func(p *Policy) { p.MinUID = 500 }, true},
		{"webroot of another tenant", func(j *wire.Job) { j.Webroot = "/srv/shared/www/other/public" }, nil, false},
		{"webroot escaping with ..", func(j *wire.Job) { j.Webroot = "/srv/shared/www/acme/../other" }, nil, false},
		{"webroot is the tenant dir's sibling prefix", func(j *wire.Job) { j.Webroot = "/srv/shared/www/acme2/public" }, nil, false},
		{"webroot outside storage", func(j *wire.Job) { j.Webroot = "/etc" }, nil, false},
		{"storage dir of another shard", func(j *wire.Job) {
			j.WebStorageDir = "/srv/other"
			j.Webroot = "/srv/other/acme/public"
		}, nil, false},
		{"storage dir / puts locks in /acme", func(j *wire.Job) { j.WebStorageDir = "/" }, nil, false},
		{"node without storage dir", func(*wire.Job) {}, func(p *Policy) { p.StorageDir = "" }, false},
		{"tenant with a slash", func(j *wire.Job) { j.Tenant = "acme/../x" }, nil, false},
		{"id not a uuid", func(j *wire.Job) { j.ID = "x" }, nil, false},
		{"upper-case uuid", func(j *wire.Job) { j.ID = "0B7C6A4E-1F2D-4C3B-9A8E-7D6C5B4A3F21" }, nil, false},
		{"no lookup configured", func(*wire.Job) {}, func(p *Policy) { p.LookupUID = nil }, false},
		// systemd gives User= its supplementary groups: a tenant account
		// that is also in systemd-journal would read every tenant's logs.
		{"user in a denied supplementary group", func(j *wire.Job) { j.User, j.Group = "sneaky", "sneaky" }, nil, false},
		{"user in group root", func(j *wire.Job) { j.User, j.Group = "rooty", "rooty" }, nil, false},
		{"no group lookup configured", func(*wire.Job) {}, func(p *Policy) { p.LookupGroups = nil }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j, p := goodJob(), pol
			c.edit(&j)
			if c.pol != nil {
				c.pol(&p)
			}
			err := Admit(j, p)
			if c.ok != (err == nil) {
				t.Fatalf("Admit = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrNotAdmitted) {
				t.Fatalf("refusal does not wrap ErrNotAdmitted: %v", err)
			}
		})
	}
}

func TestAdmitUnit(t *testing.T) {
	cases := map[string]bool{
		"cron-acme-" + jobID:                 true,
		"cron-my-shop-" + jobID:              true,
		"cron-acme-" + jobID + ".service":    false,
		"sshd":                               false,
		"cron-" + jobID:                      false,
		"cron-Acme-" + jobID:                 false,
		"cron-acme-" + jobID + "/../../sshd": false,
		"cron-acme--" + jobID:                false,
		"":                                   false,
	}
	for name, ok := range cases {
		if err := AdmitUnit(name); ok != (err == nil) {
			t.Errorf("AdmitUnit(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestBatches(t *testing.T) {
	pol := Policy{StorageDir: "/srv/shared/www", LookupUID: lookup, LookupGID: lookup, LookupGroups: groupsOf}
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Policy{LookupUID: lookup, LookupGID: lookup, LookupGroups: groupsOf}).Validate(); err == nil {
		t.Fatal("policy without storage dir validated")
	}
	bad := goodJob()
	bad.ID = "1b7c6a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21"
	bad.User = "root"
	ok, refused := Partition([]wire.Job{goodJob(), bad}, pol)
	if len(ok) != 1 || ok[0].ID != jobID || len(refused) != 1 {
		t.Fatalf("Partition = %v, %v", ok, refused)
	}
	if err := AdmitAll([]wire.Job{goodJob(), bad}, pol); err == nil {
		t.Fatal("AdmitAll admitted a root job")
	}
	if err := AdmitAll([]wire.Job{goodJob()}, pol); err != nil {
		t.Fatal(err)
	}
	if err := AdmitUnits([]string{"cron-acme-" + jobID, "sshd"}); err == nil {
		t.Fatal("AdmitUnits admitted sshd")
	}
}

// The node's real lookup: root is in group root, which admission refuses.
func TestLookupGroupsOfRoot(t *testing.T) {
	groups, err := LookupGroups("root")
	if err != nil {
		t.Skipf("no user database: %v", err)
	}
	if err := admitMemberships("root", LookupGroups, LookupGID, DefaultDeniedNames); err == nil {
		t.Fatalf("root's groups %v admitted", groups)
	}
}
