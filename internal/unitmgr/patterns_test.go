package unitmgr

import (
	"context"
	"fmt"
	"path"
	"slices"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestListPatterns(t *testing.T) {
	many := make([]string, maxNamedPatterns+1)
	for i := range many {
		many[i] = fmt.Sprintf("cron-acme-%d", i)
	}
	all := []string{"cron-*"}
	for _, tc := range []struct {
		name  string
		units []string
		want  []string
	}{
		{"none: a reconcile lists everything", nil, all},
		{"one unit", []string{"cron-acme-7"}, []string{"cron-acme-7.*"}},
		{"a few", []string{"cron-acme-7", "cron-bob-9"}, []string{"cron-acme-7.*", "cron-bob-9.*"}},
		{"as many as named", many[:maxNamedPatterns], nil},
		{"more than named", many, all},
		{"a glob in a name", []string{"cron-acme-7", "cron-a*"}, all},
		{"a class in a name", []string{"cron-a[b]"}, all},
		{"a backslash", []string{`cron-a\x2d`}, all},
		{"a NUL", []string{"cron-a\x00b"}, all},
		{"a space", []string{"cron-a b"}, all},
		{"not a cron unit", []string{"sshd"}, all},
		{"the prefix alone", []string{"cron-"}, all},
		{"a dot, an at", []string{"cron-a.b", "cron-a@1"}, []string{"cron-a.b.*", "cron-a@1.*"}},
	} {
		got := listPatterns(tc.units)
		want := tc.want
		if want == nil {
			for _, u := range tc.units {
				want = append(want, u+".*")
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: listPatterns(%v) = %v, want %v", tc.name, tc.units, got, want)
		}
	}
}

// A unit's pattern matches its own timer and service and no other unit's
// (fnmatch as systemd applies it; path.Match is the same for these).
func TestListPatternMatchesOnlyItsUnit(t *testing.T) {
	p := listPatterns([]string{"cron-acme-1"})[0]
	for name, want := range map[string]bool{
		"cron-acme-1.timer":    true,
		"cron-acme-1.service":  true,
		"cron-acme-10.timer":   false,
		"cron-acme-1x.service": false,
		"cron-acme.timer":      false,
		"cron-acme-1.b.timer":  true, // harmless: the plan looks up exact names
	} {
		if got, _ := path.Match(p, name); got != want {
			t.Errorf("%q matches %q: %v, want %v", p, name, got, want)
		}
	}
}

// An apply of one job asks systemd only about that job's units, and still
// sees that systemd holds them: a schedule change of a loaded timer
// reloads, exactly as when every cron unit was listed. A reconcile lists
// them all (it looks for orphans).
func TestApplyListsOnlyItsUnits(t *testing.T) {
	m, f := testManager(t)
	ctx := context.Background()
	if _, err := m.Reconcile(ctx, wire.DesiredSet{Jobs: []wire.Job{job(idA), job(idB), job(idC)}, Snapshot: testSnap}); err != nil {
		t.Fatal(err)
	}
	// (The fast path's fingerprint lists the cron timers not active too.)
	if !slices.ContainsFunc(f.listed, func(got []string) bool { return slices.Equal(got, []string{"cron-*"}) }) {
		t.Errorf("reconcile listed %v, want every cron unit", f.listed)
	}
	f.listed = nil
	rep, err := m.Apply(ctx, []wire.Job{job(idB, version(2), func(j *wire.Job) { j.Schedule = "*/7 * * * *" })})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cron-acme-" + idB + ".*"}
	if len(f.listed) == 0 {
		t.Fatal("the apply never listed units")
	}
	for _, got := range f.listed {
		if !slices.Equal(got, want) {
			t.Errorf("apply listed %v, want %v", got, want)
		}
	}
	if rep.Reloads != 1 || len(rep.Written) != 1 {
		t.Errorf("report %+v: want the changed timer written and one reload (systemd holds it)", rep)
	}
}
