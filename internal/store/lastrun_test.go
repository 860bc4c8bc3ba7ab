package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestDecideLastRun(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 11, 21, 12, min, 0, 0, time.UTC) }
	p := func(v time.Time) *time.Time { return &v }
	// standing: the job shows the 12:05 run (record 7) failing, and a
	// success at 12:03.
	id7, exit7 := int64(7), exit
	standing := LastRuns{lastRunID: &id7, LastRunAt: p(at(5)), LastResult: &exit7, LastFailureReason: "exit status 1",
		LastSuccessAt: p(at(3))}
	type want struct {
		id      int64
		at      time.Time
		result  wire.Result
		reason  string
		success *time.Time
		changed bool
	}
	for _, tc := range []struct {
		name string
		cur  LastRuns
		run  LastRun
		want want
	}{
		{"first run of a job", LastRuns{}, LastRun{ID: 1, At: at(0), Result: exit, FailureReason: "exit status 2"},
			want{1, at(0), exit, "exit status 2", nil, true}},
		{"first success", LastRuns{}, LastRun{ID: 1, At: at(0), Result: ok, FailureReason: "ignored"},
			want{1, at(0), ok, "", p(at(0)), true}},
		{"a newer slot takes over", standing, LastRun{ID: 8, At: at(6), Result: ok},
			want{8, at(6), ok, "", p(at(6)), true}},
		{"an older slot arriving late leaves the newer run", standing, LastRun{ID: 9, At: at(4), Result: tmo, FailureReason: "timed out"},
			want{7, at(5), exit, "exit status 1", p(at(3)), false}},
		{"an older success arriving late moves only the last success", standing, LastRun{ID: 9, At: at(4), Result: ok},
			want{7, at(5), exit, "exit status 1", p(at(4)), true}},
		{"a success older than the last success changes nothing", standing, LastRun{ID: 9, At: at(1), Result: ok},
			want{7, at(5), exit, "exit status 1", p(at(3)), false}},
		{"a late result replacing an older lost record (its old id) leaves the newer run", standing,
			LastRun{ID: 2, At: at(2), Result: exit, FailureReason: "exit status 3"},
			want{7, at(5), exit, "exit status 1", p(at(3)), false}},
		{"a real result replacing the standing record takes its place", standing,
			LastRun{ID: 7, At: at(5), Result: ok},
			want{7, at(5), ok, "", p(at(5)), true}},
		{"the same slot under a later record (a run-now at that second) wins the tie", standing,
			LastRun{ID: 8, At: at(5), Result: sig, FailureReason: "killed"},
			want{8, at(5), sig, "killed", p(at(3)), true}},
		{"the same slot under an earlier record loses the tie", standing,
			LastRun{ID: 6, At: at(5), Result: sig, FailureReason: "killed"},
			want{7, at(5), exit, "exit status 1", p(at(3)), false}},
		{"a newer overlap skip is the newest slot's record", standing,
			LastRun{ID: 8, At: at(6), Result: skip, FailureReason: "previous run still running"},
			want{8, at(6), skip, "previous run still running", p(at(3)), true}},
		{"a sweeper's lost record is no report", standing, LastRun{ID: 8, At: at(9), Result: lost, FailureReason: "no node reported"},
			want{7, at(5), exit, "exit status 1", p(at(3)), false}},
		{"a lost record of a job without runs", LastRuns{}, LastRun{ID: 1, At: at(9), Result: lost},
			want{0, time.Time{}, "", "", nil, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := decideLastRun(tc.cur, tc.run)
			if changed != tc.want.changed {
				t.Errorf("changed = %v, want %v", changed, tc.want.changed)
			}
			if tc.want.id == 0 {
				if got.lastRunID != nil || got.LastRunAt != nil || got.LastResult != nil {
					t.Errorf("got a last run %+v, want none", got)
				}
				return
			}
			if got.lastRunID == nil || *got.lastRunID != tc.want.id || got.LastRunAt == nil || !got.LastRunAt.Equal(tc.want.at) ||
				got.LastResult == nil || *got.LastResult != tc.want.result || got.LastFailureReason != tc.want.reason {
				t.Errorf("last run = id %v at %v %v %q, want id %d at %v %s %q", deref(got.lastRunID), deref(got.LastRunAt),
					deref(got.LastResult), got.LastFailureReason, tc.want.id, tc.want.at, tc.want.result, tc.want.reason)
			}
			if (got.LastSuccessAt == nil) != (tc.want.success == nil) ||
				(got.LastSuccessAt != nil && !got.LastSuccessAt.Equal(*tc.want.success)) {
				t.Errorf("last success = %v, want %v", deref(got.LastSuccessAt), deref(tc.want.success))
			}
			// The job's standing values are never written through.
			if tc.cur.LastRunAt != nil && !tc.cur.LastRunAt.Equal(at(5)) {
				t.Errorf("decideLastRun changed its input")
			}
		})
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestDisabledReasonAfter(t *testing.T) {
	for _, tc := range []struct {
		name                string
		wasEnabled, enabled bool
		had, given          string
		want                string
	}{
		{"a disable with a reason keeps it", true, false, "", "migrating", "migrating"},
		{"a second disable with a reason replaces it", false, false, "migrating", "broken", "broken"},
		{"a disable without a reason keeps the earlier one", false, false, "migrating", "", "migrating"},
		{"an edit of a disabled job keeps it", false, false, "migrating", "", "migrating"},
		{"enabling clears it", false, true, "migrating", "", ""},
		{"an enabled job never has one", true, true, "", "ignored", ""},
		// An older replica's enable left the column set; the next disable
		// without a reason must not bring it back.
		{"a stale reason does not come back", true, false, "migrating", "", ""},
	} {
		if got := disabledReasonAfter(tc.wasEnabled, tc.enabled, tc.had, tc.given); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
