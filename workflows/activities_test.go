package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/hostcron/hostcron/internal/wire"
)

// fakeStore answers the core activities from fields.
type fakeStore struct {
	CoreStore // methods a test does not set panic
	jobs      []wire.Job
	known     bool
	err       error
}

func (f fakeStore) NodeDesiredJobs(context.Context, string) ([]wire.Job, bool, error) {
	return f.jobs, f.known, f.err
}

// fakeUnits records what the node activities asked of the unit manager.
type fakeUnits struct {
	NodeUnits
	rep          wire.NodeReport
	err          error
	minOrphanAge time.Duration
}

func (f *fakeUnits) Apply(context.Context, []wire.Job) (wire.NodeReport, error) { return f.rep, f.err }
func (f *fakeUnits) Reconcile(_ context.Context, _ []wire.Job, age time.Duration) (wire.NodeReport, error) {
	f.minOrphanAge = age
	return f.rep, f.err
}

// retry is how Temporal will treat an activity's error.
type retry int

const (
	noError retry = iota
	retried
	final
)

func classify(err error) retry {
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return noError
	case errors.As(err, &app) && app.NonRetryable():
		return final
	default:
		return retried
	}
}

func TestDesiredForNodeRetriesOnlyWhatMayHeal(t *testing.T) {
	jobs := []wire.Job{{ID: "a", Tenant: "acme"}}
	for _, tc := range []struct {
		name  string
		store fakeStore
		want  retry
		jobs  int
	}{
		{"known node", fakeStore{jobs: jobs, known: true}, noError, 1},
		{"known node, empty shard", fakeStore{known: true}, noError, 0},
		{"unknown node", fakeStore{}, final, 0},
		{"database down", fakeStore{err: errors.New("connection refused")}, retried, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (&CoreActivities{Store: tc.store}).DesiredForNode(context.Background(), "n1")
			if c := classify(err); c != tc.want {
				t.Errorf("error %v: class %d, want %d", err, c, tc.want)
			}
			if len(got) != tc.jobs {
				t.Errorf("%d jobs, want %d", len(got), tc.jobs)
			}
		})
	}
}

func TestApplyJobsFailsFinallyOnABadJob(t *testing.T) {
	for _, tc := range []struct {
		name  string
		units fakeUnits
		want  retry
	}{
		{"applied", fakeUnits{rep: wire.NodeReport{Written: []string{"cron-acme-a.timer"}}}, noError},
		{"a job rejected", fakeUnits{rep: wire.NodeReport{Failed: []string{"a: bad schedule"}}}, final},
		{"systemd unreachable", fakeUnits{err: errors.New("dbus: connection closed")}, retried},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := (&NodeActivities{Units: &tc.units}).ApplyJobs(context.Background(), []wire.Job{{ID: "a"}})
			if c := classify(err); c != tc.want {
				t.Errorf("error %v: class %d, want %d", err, c, tc.want)
			}
		})
	}
}

func TestReconcilePassesTheOrphanAge(t *testing.T) {
	u := &fakeUnits{}
	if _, err := (&NodeActivities{Units: u, MinOrphanAge: 30 * time.Second}).Reconcile(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if u.minOrphanAge != 30*time.Second {
		t.Errorf("reconcile got min orphan age %v, want 30s", u.minOrphanAge)
	}
}
