package store

import (
	"reflect"
	"testing"
	"time"
)

func TestPlanRunPartitions(t *testing.T) {
	month := func(y int, m time.Month) time.Time { return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) }
	now := time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)
	cutoff := now.Add(-180 * 24 * time.Hour) // 2026-05-27
	for _, tc := range []struct {
		name     string
		existing []string
		now      time.Time
		cutoff   time.Time
		want     RunPartitionPlan
	}{
		{"nothing yet: now's month and three ahead", []string{"cron_job_runs_default"}, now, cutoff,
			RunPartitionPlan{Create: []time.Time{month(2026, 11), month(2026, 12), month(2027, 1), month(2027, 2)}}},
		{"all there: nothing to do", []string{"cron_job_runs_default", "cron_job_runs_2026_06", "cron_job_runs_2026_11",
			"cron_job_runs_2026_12", "cron_job_runs_2027_01", "cron_job_runs_2027_02"}, now, cutoff, RunPartitionPlan{}},
		{"months wholly past the cutoff go, the cutoff's month stays", []string{"cron_job_runs_2026_04", "cron_job_runs_2026_05",
			"cron_job_runs_2026_06", "cron_job_runs_2026_11", "cron_job_runs_2026_12", "cron_job_runs_2027_01"}, now, cutoff,
			RunPartitionPlan{Create: []time.Time{month(2027, 2)}, Drop: []string{"cron_job_runs_2026_04"}}},
		{"a month ending exactly at the cutoff goes", []string{"cron_job_runs_2026_04", "cron_job_runs_2026_05"},
			time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC), month(2026, 6), RunPartitionPlan{
				Create: []time.Time{month(2026, 12), month(2027, 1), month(2027, 2), month(2027, 3)},
				Drop:   []string{"cron_job_runs_2026_04", "cron_job_runs_2026_05"}}},
		{"the default partition and foreign names are never dropped", []string{"cron_job_runs_default", "cron_job_runs_old",
			"cron_job_runs_2001_13"}, now, cutoff, RunPartitionPlan{Create: []time.Time{month(2026, 11), month(2026, 12), month(2027, 1), month(2027, 2)}}},
		{"a clock behind the retention creates nothing it would drop", nil, now, now.AddDate(0, 2, 0),
			RunPartitionPlan{Create: []time.Time{month(2027, 1), month(2027, 2)}}},
		{"the year turns", []string{"cron_job_runs_2026_12"}, time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC), cutoff,
			RunPartitionPlan{Create: []time.Time{month(2027, 1), month(2027, 2), month(2027, 3)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planRunPartitions(tc.existing, tc.now, tc.cutoff, 3)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRunPartitionNames(t *testing.T) {
	m := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := runPartitionName(m); got != "cron_job_runs_2027_01" {
		t.Fatalf("name %s", got)
	}
	if back, ok := runPartitionMonth(runPartitionName(m)); !ok || !back.Equal(m) {
		t.Fatalf("month of its own name: %v %v", back, ok)
	}
	if got := runPartitionName(time.Date(2026, 12, 31, 23, 0, 0, 0, time.FixedZone("x", -3600))); got != "cron_job_runs_2027_01" {
		t.Fatalf("a time in another zone names its UTC month: %s", got)
	}
}
