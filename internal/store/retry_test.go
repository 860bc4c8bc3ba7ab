package store

import (
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestRetryDelay(t *testing.T) {
	for _, tt := range []struct {
		delay, failed int
		want          time.Duration
	}{
		{60, 1, time.Minute},
		{60, 2, 2 * time.Minute},
		{60, 3, 4 * time.Minute},
		{1, 10, 512 * time.Second},
		{3600, 3, 4 * time.Hour},
		{3600, 4, 6 * time.Hour}, // capped
		{3600, 11, 6 * time.Hour},
		{1, 60, 6 * time.Hour}, // no overflow
	} {
		if got := retryDelay(tt.delay, tt.failed); got != tt.want {
			t.Errorf("retryDelay(%d, %d) = %s, want %s", tt.delay, tt.failed, got, tt.want)
		}
	}
}

func TestDecideRetry(t *testing.T) {
	const jobID = "0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10"
	slot := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	next := slot.Add(time.Hour)
	now := slot.Add(2 * time.Minute)
	job := CronJob{ID: jobID, Version: 4, JobFields: JobFields{Enabled: true, Retries: 2, RetryDelaySeconds: 60}}
	parse := func(s string) runkey.Key {
		k, err := runkey.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	scheduled, retry2, retry3 := parse(runkey.Scheduled(jobID, slot)), parse(runkey.Retry(jobID, slot, 2)), parse(runkey.Retry(jobID, slot, 3))
	base := retryInput{Key: scheduled, Result: wire.ResultExitCode, Version: 4, Job: job, Now: now, NextSlot: next}
	for _, tt := range []struct {
		name    string
		edit    func(in *retryInput)
		wantKey string
		wantDue time.Time
	}{
		{"a failed scheduled run", func(*retryInput) {}, runkey.Retry(jobID, slot, 2), now.Add(time.Minute)},
		{"a failed catch-up (a scheduled key)", func(in *retryInput) { in.Result = wire.ResultTimeout }, runkey.Retry(jobID, slot, 2), now.Add(time.Minute)},
		{"a failed retry backs off", func(in *retryInput) { in.Key = retry2 }, runkey.Retry(jobID, slot, 3), now.Add(2 * time.Minute)},
		{"the last attempt", func(in *retryInput) { in.Key = retry3 }, "", time.Time{}},
		{"no retries", func(in *retryInput) { in.Job.Retries = 0 }, "", time.Time{}},
		{"a success", func(in *retryInput) { in.Result = wire.ResultSuccess }, "", time.Time{}},
		{"a platform error", func(in *retryInput) { in.Result = wire.ResultPlatformError }, "", time.Time{}},
		{"a run its node's shutdown stopped", func(in *retryInput) { in.Result, in.Interrupted = wire.ResultPlatformError, true }, runkey.Retry(jobID, slot, 2), now.Add(time.Minute)},
		{"a retry its node's shutdown stopped", func(in *retryInput) {
			in.Key, in.Result, in.Interrupted = retry2, wire.ResultPlatformError, true
		}, runkey.Retry(jobID, slot, 3), now.Add(2 * time.Minute)},
		{"interrupted, but the last attempt", func(in *retryInput) {
			in.Key, in.Result, in.Interrupted = retry3, wire.ResultPlatformError, true
		}, "", time.Time{}},
		{"interrupted is only for a platform error", func(in *retryInput) { in.Result, in.Interrupted = wire.ResultCancelled, true }, "", time.Time{}},
		{"lost", func(in *retryInput) { in.Result = wire.ResultLost }, "", time.Time{}},
		{"an overlap skip", func(in *retryInput) { in.Result = wire.ResultOverlapSkipped }, "", time.Time{}},
		{"cancelled", func(in *retryInput) { in.Result = wire.ResultCancelled }, "", time.Time{}},
		{"a failed run-now", func(in *retryInput) { in.Key = parse(runkey.Manual(jobID, "7")) }, "", time.Time{}},
		{"a failed backfill", func(in *retryInput) { in.Key = parse(runkey.Backfill(jobID, slot, "7")) }, "", time.Time{}},
		{"a redelivered outcome", func(in *retryInput) { in.Duplicate = true }, "", time.Time{}},
		{"a retry queued already", func(in *retryInput) { in.Superseded = true }, "", time.Time{}},
		{"the job disabled since", func(in *retryInput) { in.Job.Enabled = false }, "", time.Time{}},
		{"the job changed since", func(in *retryInput) { in.Version = 3 }, "", time.Time{}},
		{"due just before the next slot", func(in *retryInput) { in.Now = next.Add(-time.Minute - time.Second) }, runkey.Retry(jobID, slot, 2), next.Add(-time.Second)},
		{"due at the next slot", func(in *retryInput) { in.Now = next.Add(-time.Minute) }, "", time.Time{}},
		{"a late outcome, after the next slot", func(in *retryInput) { in.Now = next.Add(time.Hour) }, "", time.Time{}},
		{"no next slot", func(in *retryInput) { in.NextSlot = time.Time{} }, "", time.Time{}},
		{"a weekly job, due over a day after its slot", func(in *retryInput) {
			in.NextSlot = slot.Add(7 * 24 * time.Hour)
			in.Now = slot.Add(wire.MaxRetryStart - 30*time.Second)
		}, "", time.Time{}},
		{"a weekly job, within a day of its slot", func(in *retryInput) {
			in.NextSlot = slot.Add(7 * 24 * time.Hour)
			in.Now = slot.Add(wire.MaxRetryStart - 2*time.Minute)
		}, runkey.Retry(jobID, slot, 2), slot.Add(wire.MaxRetryStart - time.Minute)},
	} {
		in := base
		tt.edit(&in)
		plan, ok, why := decideRetry(in)
		if ok != (tt.wantKey != "") || plan.Key != tt.wantKey || !plan.Due.Equal(tt.wantDue) {
			t.Errorf("%s: %+v %v (%s), want key %q due %s", tt.name, plan, ok, why, tt.wantKey, tt.wantDue)
		}
		if !ok && why == "" {
			t.Errorf("%s: no retry, and no reason", tt.name)
		}
	}
}
