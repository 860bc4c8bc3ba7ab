package store

import (
	"reflect"
	"testing"
	"time"
)

func TestUsageWarnings(t *testing.T) {
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := start.Add(d); return &v }
	mib := func(n int64) *int64 { v := n << 20; return &v }
	job := CronJob{JobFields: JobFields{TimeoutSeconds: 100, MaxMemoryMB: 100}}
	for _, tc := range []struct {
		name string
		job  CronJob
		o    Outcome
		want []string
	}{
		{"well within both", job, Outcome{StartedAt: at(0), FinishedAt: at(10 * time.Second), PeakMemoryBytes: mib(10)}, []string{}},
		{"just under 80% of the timeout", job, Outcome{StartedAt: at(0), FinishedAt: at(79 * time.Second)}, []string{}},
		{"80% of the timeout", job, Outcome{StartedAt: at(0), FinishedAt: at(80 * time.Second)},
			[]string{"ran 80 s of its 100 s timeout (80%)"}},
		{"80% of the memory limit", job, Outcome{PeakMemoryBytes: mib(80)},
			[]string{"peak memory 80 MiB of its 100 MiB limit (80%)"}},
		{"both", job, Outcome{StartedAt: at(0), FinishedAt: at(99 * time.Second), PeakMemoryBytes: mib(95)},
			[]string{"ran 99 s of its 100 s timeout (99%)", "peak memory 95 MiB of its 100 MiB limit (95%)"}},
		{"no times, no memory figure", job, Outcome{}, []string{}},
		{"a job without a memory limit", CronJob{JobFields: JobFields{TimeoutSeconds: 100}}, Outcome{PeakMemoryBytes: mib(4000)}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := usageWarnings(tc.job, tc.o); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
