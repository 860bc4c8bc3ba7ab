package store

import (
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

const (
	ok     = wire.ResultSuccess
	exit   = wire.ResultExitCode
	sig    = wire.ResultSignal
	tmo    = wire.ResultTimeout
	oom    = wire.ResultOOM
	failed = wire.ResultFailed
	skip   = wire.ResultOverlapSkipped
	lost   = wire.ResultLost
	plat   = wire.ResultPlatformError
	canc   = wire.ResultCancelled
)

func TestCountFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		results  []wire.Result
		max      int
		failures int
		disable  bool
	}{
		{"no history", nil, 3, 0, false},
		{"every tenant failure counts", []wire.Result{exit, sig, tmo, oom, failed}, 5, 5, true},
		{"below the threshold", []wire.Result{exit, exit}, 3, 2, false},
		{"a success resets", []wire.Result{exit, exit, ok, exit}, 2, 1, false},
		{"lost never counts", []wire.Result{exit, lost, lost, lost, exit}, 3, 2, false},
		{"platform errors never count", []wire.Result{plat, plat, plat}, 1, 0, false},
		{"overlap skips neither count nor reset", []wire.Result{exit, skip, exit, skip}, 2, 2, true},
		{"cancelled runs neither count nor reset", []wire.Result{exit, canc, exit, canc}, 2, 2, true},
		{"a late success between failures breaks the run", []wire.Result{exit, ok, exit, exit}, 3, 2, false},
		{"max 0 never disables", []wire.Result{exit, exit, exit}, 0, 3, false},
		{"past the threshold still counts", []wire.Result{exit, exit, exit, exit}, 3, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, d := CountFailures(tc.results, tc.max)
			if f != tc.failures || d != tc.disable {
				t.Errorf("CountFailures(%v, %d) = %d, %v; want %d, %v", tc.results, tc.max, f, d, tc.failures, tc.disable)
			}
		})
	}
}

func TestCountedResultsAreSuccessAndTenantFailures(t *testing.T) {
	got := map[string]bool{}
	for _, r := range countedResults() {
		got[r] = true
	}
	for _, r := range []wire.Result{ok, exit, sig, tmo, oom, failed} {
		if !got[string(r)] {
			t.Errorf("%s missing from the recount", r)
		}
	}
	for _, r := range []wire.Result{skip, lost, plat} {
		if got[string(r)] {
			t.Errorf("%s must not reach the recount", r)
		}
	}
}

func TestDecideAutoDisable(t *testing.T) {
	job := func(enabled bool, st wire.Status) CronJob {
		return CronJob{JobFields: JobFields{Enabled: enabled}, Status: st}
	}
	for _, tc := range []struct {
		name              string
		job               CronJob
		disable, replaced bool
		want              autoDisableStep
	}{
		{"threshold reached trips", job(true, wire.StatusActive), true, false, tripAutoDisable},
		{"threshold reached while pending trips", job(true, wire.StatusPending), true, false, tripAutoDisable},
		{"already auto-disabled: once only", job(false, wire.StatusAutoDisabled), true, false, keepState},
		{"disabled by the tenant stays as it is", job(false, wire.StatusPending), true, false, keepState},
		{"deleting stays deleting", job(false, wire.StatusDeleting), true, false, keepState},
		{"below threshold, nothing replaced", job(true, wire.StatusActive), false, false, keepState},
		{"in-flight outcome after auto-disable does not lift", job(false, wire.StatusAutoDisabled), false, false, keepState},
		{"replacement below threshold lifts", job(false, wire.StatusAutoDisabled), false, true, liftAutoDisable},
		{"replacement still at threshold keeps it", job(false, wire.StatusAutoDisabled), true, true, keepState},
		{"replacement on a tenant-disabled job does not enable", job(false, wire.StatusDisabled), false, true, keepState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideAutoDisable(tc.job, tc.disable, tc.replaced); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDecideRecord(t *testing.T) {
	r := func(x wire.Result) *wire.Result { return &x }
	for _, tc := range []struct {
		stored   *wire.Result
		incoming wire.Result
		want     recordStep
	}{
		{nil, exit, insertRun},
		{nil, skip, insertRun},
		{r(lost), ok, replaceRun},
		{r(lost), exit, replaceRun},
		{r(lost), skip, replaceRun},
		{r(lost), plat, replaceRun},
		{r(skip), ok, replaceRun},
		{r(skip), exit, replaceRun},
		{r(skip), skip, duplicateRun},
		{r(ok), ok, duplicateRun},
		{r(ok), exit, duplicateRun},
		{r(exit), ok, duplicateRun},
		{r(plat), ok, replaceRun}, // another node ran the slot its storage failed
		{r(plat), exit, replaceRun},
		{r(plat), plat, duplicateRun},
		{r(plat), skip, duplicateRun},
		{r(plat), lost, duplicateRun},
		{r(ok), plat, duplicateRun},
		{nil, canc, insertRun},
		{r(lost), canc, replaceRun}, // a run outliving its grace, then stopped
		{r(plat), canc, replaceRun}, // the node that ran it, stopped on request
		{r(skip), canc, replaceRun},
		{r(canc), ok, replaceRun}, // its runner was stopped electing: another node ran the slot
		{r(canc), exit, replaceRun},
		{r(canc), canc, duplicateRun},
		{r(canc), plat, duplicateRun},
		{r(canc), lost, duplicateRun},
		{r(ok), canc, duplicateRun}, // the run had ended on its own
		{r(exit), canc, duplicateRun},
	} {
		stored := "none"
		if tc.stored != nil {
			stored = string(*tc.stored)
		}
		if got := decideRecord(tc.stored, tc.incoming); got != tc.want {
			t.Errorf("stored %s, incoming %s: got %d, want %d", stored, tc.incoming, got, tc.want)
		}
	}
}

func TestRearms(t *testing.T) {
	base := CronJob{JobFields: JobFields{Schedule: "*/5 * * * *", Timezone: "UTC", Command: "true", Enabled: true}}
	with := func(f func(*CronJob)) CronJob { j := base; f(&j); return j }
	for _, tc := range []struct {
		name          string
		before, after CronJob
		want          bool
	}{
		{"command-only edit", base, with(func(j *CronJob) { j.Command = "false" }), false},
		{"timeout edit", base, with(func(j *CronJob) { j.TimeoutSeconds = 9 }), false},
		{"schedule change", base, with(func(j *CronJob) { j.Schedule = "0 3 * * *" }), true},
		{"time zone change", base, with(func(j *CronJob) { j.Timezone = "Europe/Berlin" }), true},
		{"enable", with(func(j *CronJob) { j.Enabled = false }), base, true},
		{"disable", base, with(func(j *CronJob) { j.Enabled = false }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rearms(tc.before, tc.after); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// What corrects a job's history, so that its recount may lift an
// auto-disable: a replacement, or a retry's success that settled the
// attempt the core queued it for; no other run that merely arrives after
// the disable, nor a retry key no retry was queued for.
func TestCorrectsHistory(t *testing.T) {
	for _, tc := range []struct {
		name              string
		replaced, settled bool
		result            wire.Result
		want              bool
	}{
		{"a replacement", true, false, ok, true},
		{"a retry's success that settled its attempt", false, true, ok, true},
		{"a retry's failure", false, true, exit, false},
		{"a retry's cancel", false, true, wire.ResultCancelled, false},
		{"a success under a retry key no retry was queued for", false, false, ok, false},
		{"any other run's success in flight at the disable", false, false, ok, false},
	} {
		if got := correctsHistory(tc.replaced, tc.settled, tc.result); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
