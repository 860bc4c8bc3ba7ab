package trust

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

// TestPartitionLooksUpEachAccountOnce: a batch of many jobs of a few
// accounts looks each name up once per call, not once per job, and
// admits and refuses exactly what per-job lookups do (a refused account,
// an unknown one, a failed lookup's error, all remembered); the next
// call looks up again, so an account changed between calls is seen.
func TestPartitionLooksUpEachAccountOnce(t *testing.T) {
	calls := map[string]int{}
	count := func(kind string, f func(string) (uint32, error)) func(string) (uint32, error) {
		return func(n string) (uint32, error) { calls[kind+" "+n]++; return f(n) }
	}
	pol := Policy{StorageDir: "/srv/shared/www", LookupUID: count("uid", lookup), LookupGID: count("gid", lookup),
		LookupGroups: func(n string) ([]string, error) { calls["groups "+n]++; return groupsOf(n) }}
	var jobs []wire.Job
	for i := range 300 {
		j := goodJob()
		j.ID = fmt.Sprintf("%08x-1f2d-4c3b-9a8e-7d6c5b4a3f21", i)
		switch i % 3 {
		case 1:
			j.User, j.Group = "sneaky", "sneaky" // in systemd-journal: refused
		case 2:
			j.User = "ghost" // unknown: refused
		}
		jobs = append(jobs, j)
	}
	// What per-job lookups (no memo: Admit alone) admit and refuse.
	var wantOK []wire.Job
	var wantRefused []string
	for _, j := range jobs {
		if err := Admit(j, pol); err != nil {
			wantRefused = append(wantRefused, err.Error())
		} else {
			wantOK = append(wantOK, j)
		}
	}
	if len(wantOK) != 100 || len(wantRefused) != 200 {
		t.Fatalf("per-job admission: %d admitted, %d refused; want 100 and 200", len(wantOK), len(wantRefused))
	}
	clear(calls)
	ok, refused := Partition(jobs, pol)
	if !slices.EqualFunc(ok, wantOK, func(a, b wire.Job) bool { return a.ID == b.ID }) || !slices.Equal(refused, wantRefused) {
		t.Fatalf("Partition admitted %d, refused %d, differently from per-job admission", len(ok), len(refused))
	}
	for k, n := range calls {
		if n != 1 {
			t.Errorf("%s looked up %d times in one call; want once", k, n)
		}
	}
	if calls["uid acme"] != 1 || calls["groups sneaky"] != 1 {
		t.Fatalf("lookups %v: the accounts were not looked up at all", calls)
	}
	// A second call looks up again: nothing is kept between calls.
	ids["ghost"] = 1777
	memberships["ghost"] = []string{"ghost"}
	defer func() { delete(ids, "ghost"); delete(memberships, "ghost") }()
	ok, _ = Partition(jobs, pol)
	if len(ok) != 200 || calls["uid ghost"] != 2 {
		t.Fatalf("second call admitted %d (want 200: ghost now exists), uid ghost looked up %d times in all", len(ok), calls["uid ghost"])
	}
}
