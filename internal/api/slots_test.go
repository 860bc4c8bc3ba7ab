package api

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runkey"
)

// slotsNow is the clock of the slots tests: a week after Berlin's 2026
// spring-forward (29 March, 02:00 -> 03:00).
var slotsNow = time.Date(2026, 4, 4, 0, 31, 0, 0, time.UTC)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// slotsJob creates a job through the API and gives it a past written
// directly (the API cannot backdate): its create event and creation at
// created, then the given trail entries.
func (v *env) slotsJob(schedule, tz string, created time.Time, trail ...[3]string) string {
	v.t.Helper()
	body := `{"webroot_id":"` + v.webroot + `","schedule":"` + schedule + `","timezone":"` + tz + `","command":"true"}`
	id := v.mustJSON("POST", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, body, 201)["id"].(string)
	v.sql(`UPDATE cron_jobs SET created_at = $2 WHERE id = $1`, id, created)
	v.sql(`UPDATE cron_job_events SET at = $2 WHERE cron_job_id = $1`, id, created)
	for _, e := range trail { // at, action, detail
		v.sql(`INSERT INTO cron_job_events (cron_job_id, tenant_id, actor, action, version, detail, at)
			SELECT id, tenant_id, 'system', $3, version, $4::jsonb, $2 FROM cron_jobs WHERE id = $1`, id, utc(e[0]), e[1], e[2])
	}
	return id
}

func (v *env) sql(stmt string, args ...any) {
	v.t.Helper()
	if _, err := v.store.Pool().Exec(context.Background(), stmt, args...); err != nil {
		v.t.Fatalf("%s: %v", stmt, err)
	}
}

// record writes a run as a node's report (or the sweeper's lost) would.
func (v *env) record(id, slot, result string) {
	v.t.Helper()
	v.sql(`INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, exit_code)
		VALUES ($1, $2, 1, $3, $4, CASE WHEN $4 = 'exit_code' THEN 3 END)`,
		runkey.Scheduled(id, utc(slot)), id, utc(slot), result)
}

type slotsAnswer struct {
	ScheduleSince time.Time `json:"schedule_since"`
	From, To      time.Time
	Slots         []struct {
		ScheduledAt *time.Time `json:"scheduled_at"`
		WallTime    string     `json:"wall_time"`
		State       string     `json:"state"`
		OffSchedule bool       `json:"off_schedule"`
		Run         *struct {
			RunKey   string `json:"run_key"`
			Result   string `json:"result"`
			ExitCode *int   `json:"exit_code"`
		} `json:"run"`
	} `json:"slots"`
}

func (v *env) slots(id, query, key string) (int, slotsAnswer, string) {
	v.t.Helper()
	code, out := v.do("GET", "/api/v1/cron-jobs/"+id+"/slots"+query, key, "")
	var a slotsAnswer
	if code == 200 {
		if err := json.Unmarshal(out, &a); err != nil {
			v.t.Fatal(err)
		}
	}
	return code, a, string(out)
}

// Why didn't it run on 29 March? A daily 02:30 in Berlin over the spring
// forward, with every kind of record, a disable interval and the time
// before its first provisioning.
func TestSlotsAccountForEveryFireTime(t *testing.T) {
	v := newEnvWith(t, Config{Now: func() time.Time { return slotsNow }})
	id := v.slotsJob("30 2 * * *", "Europe/Berlin", utc("2026-03-20T00:00:00Z"),
		[3]string{"2026-03-20T02:00:00Z", "provisioned", `{"status":"active","nodes":1}`},
		[3]string{"2026-03-25T12:00:00Z", "disable", `{}`},
		[3]string{"2026-03-25T12:01:00Z", "provisioned", `{"status":"disabled","nodes":1}`},
		[3]string{"2026-03-27T12:00:00Z", "enable", `{}`},
		[3]string{"2026-03-27T12:05:00Z", "provisioned", `{"status":"active","nodes":1}`},
		[3]string{"2026-03-28T12:00:00Z", "run_now", `{}`},
	)
	v.sql(`UPDATE cron_jobs SET swept_until = $2 WHERE id = $1`, id, utc("2026-04-02T00:30:00Z"))
	// CET (+01:00) until the 29th: 02:30 is 01:30 UTC; CEST after: 00:30 UTC.
	v.record(id, "2026-03-21T01:30:00Z", "success")
	v.record(id, "2026-03-22T01:30:00Z", "lost")
	v.record(id, "2026-03-23T01:30:00Z", "overlap_skipped")
	v.record(id, "2026-03-24T01:30:00Z", "cancelled")
	v.record(id, "2026-03-25T01:30:00Z", "exit_code")
	v.record(id, "2026-03-28T01:30:00Z", "platform_error")
	v.record(id, "2026-03-28T05:00:00Z", "lost") // an earlier schedule's slot: listed, off schedule
	v.record(id, "2026-03-30T00:30:00Z", "success")
	v.record(id, "2026-04-01T00:30:00Z", "lost")
	v.record(id, "2026-04-02T00:30:00Z", "lost")
	v.manualOutcome(id, "77", utc("2026-03-30T10:00:00Z"), "success") // not a slot

	code, a, out := v.slots(id, "?from=2026-03-20T00:00:00Z&to=2026-04-04T12:00:00Z", v.key)
	if code != 200 {
		t.Fatalf("slots: %d %s", code, out)
	}
	want := []string{
		"2026-03-20T01:30:00Z 2026-03-20T02:30:00 not_yet_provisioned",
		"2026-03-21T01:30:00Z 2026-03-21T02:30:00 ran success",
		"2026-03-22T01:30:00Z 2026-03-22T02:30:00 lost lost",
		"2026-03-23T01:30:00Z 2026-03-23T02:30:00 skipped_overlap overlap_skipped",
		"2026-03-24T01:30:00Z 2026-03-24T02:30:00 cancelled cancelled",
		"2026-03-25T01:30:00Z 2026-03-25T02:30:00 ran exit_code",
		"2026-03-26T01:30:00Z 2026-03-26T02:30:00 job_disabled",
		"2026-03-27T01:30:00Z 2026-03-27T02:30:00 job_disabled",
		"2026-03-28T01:30:00Z 2026-03-28T02:30:00 platform_error platform_error",
		"2026-03-28T05:00:00Z 2026-03-28T06:00:00 lost lost off-schedule",
		"- 2026-03-29T02:30:00 dst_gap",
		"2026-03-30T00:30:00Z 2026-03-30T02:30:00 ran success",
		"2026-03-31T00:30:00Z 2026-03-31T02:30:00 unknown", // swept past, yet no record: never invented
		"2026-04-01T00:30:00Z 2026-04-01T02:30:00 lost lost",
		"2026-04-02T00:30:00Z 2026-04-02T02:30:00 lost lost",
		"2026-04-03T00:30:00Z 2026-04-03T02:30:00 not_swept_yet",
		"2026-04-04T00:30:00Z 2026-04-04T02:30:00 pending", // one minute old; timeout 300 s + grace
	}
	var got []string
	for _, s := range a.Slots {
		line := "-"
		if s.ScheduledAt != nil {
			line = s.ScheduledAt.Format(time.RFC3339)
		}
		line += " " + s.WallTime + " " + s.State
		if s.Run != nil {
			line += " " + s.Run.Result
			if s.Run.RunKey != id+"#scheduled#"+s.ScheduledAt.Format(time.RFC3339) {
				t.Errorf("slot %s carries run %s", line, s.Run.RunKey)
			}
		}
		if s.OffSchedule {
			line += " off-schedule"
		}
		got = append(got, line)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("slots:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !a.ScheduleSince.Equal(utc("2026-03-20T00:00:00Z")) {
		t.Errorf("schedule_since = %v", a.ScheduleSince)
	}
	for _, s := range a.Slots {
		if s.Run != nil && s.Run.Result == "exit_code" && (s.Run.ExitCode == nil || *s.Run.ExitCode != 3) {
			t.Errorf("the ran slot does not carry its run's exit code: %+v", s.Run)
		}
	}
}

// A schedule change: fire times before it were another schedule's, so
// only its recorded runs are listed, off schedule.
func TestSlotsAfterAScheduleChange(t *testing.T) {
	v := newEnvWith(t, Config{Now: func() time.Time { return slotsNow }})
	id := v.slotsJob("0 * * * *", "UTC", utc("2026-04-01T00:00:00Z"),
		[3]string{"2026-04-01T00:00:30Z", "provisioned", `{"status":"active","nodes":1}`},
		[3]string{"2026-04-03T22:10:00Z", "update", `{"fields":["schedule"]}`},
		[3]string{"2026-04-03T22:11:00Z", "provisioned", `{"status":"active","nodes":1}`},
	)
	v.sql(`UPDATE cron_jobs SET swept_until = $2 WHERE id = $1`, id, utc("2026-04-04T00:00:00Z"))
	v.record(id, "2026-04-03T21:30:00Z", "success") // the old schedule's
	v.record(id, "2026-04-03T23:00:00Z", "success")
	v.record(id, "2026-04-04T00:00:00Z", "success")
	code, a, out := v.slots(id, "?from=2026-04-03T21:00:00Z&to=2026-04-04T00:31:00Z", v.key)
	if code != 200 {
		t.Fatalf("slots: %d %s", code, out)
	}
	if !a.ScheduleSince.Equal(utc("2026-04-03T22:10:00Z")) {
		t.Errorf("schedule_since = %v", a.ScheduleSince)
	}
	var got []string
	for _, s := range a.Slots {
		got = append(got, s.ScheduledAt.Format("15:04")+" "+s.State+map[bool]string{true: "*"}[s.OffSchedule])
	}
	if want := "21:30 ran* 23:00 ran 00:00 ran"; strings.Join(got, " ") != want {
		t.Errorf("slots %q, want %q", strings.Join(got, " "), want)
	}
}

func TestSlotsBoundsAndScope(t *testing.T) {
	v := newEnvWith(t, Config{Now: func() time.Time { return slotsNow }})
	id := v.slotsJob("*/5 * * * *", "UTC", utc("2026-03-01T00:00:00Z"))
	minutely := v.slotsJob("* * * * *", "UTC", utc("2026-03-01T00:00:00Z"))
	for _, tc := range []struct {
		job, query, field, says string
	}{
		{id, "?from=2026-03-01T00:00:00Z&to=2026-04-02T00:00:00Z", "to", "31 days"},
		{id, "?from=2026-04-02T00:00:00Z&to=2026-04-02T00:00:00Z", "to", "after from"},
		{id, "?from=2026-04-02T00:00:00Z&to=2026-04-01T00:00:00Z", "to", "after from"},
		{id, "?from=yesterday", "from", "RFC 3339"},
		{minutely, "?from=2026-03-28T00:00:00Z&to=2026-04-01T00:00:00Z", "from", "5000 fire times"},
	} {
		code, _, out := v.slots(tc.job, tc.query, v.key)
		if code != 400 || !strings.Contains(out, `"field":"`+tc.field+`"`) || !strings.Contains(out, tc.says) {
			t.Errorf("%s: %d %s, want 400 on %s saying %q", tc.query, code, out, tc.field, tc.says)
		}
	}
	// Defaults: the last 24 hours; from alone spans 24 hours after it.
	code, a, out := v.slots(id, "", v.key)
	if code != 200 || !a.To.Equal(slotsNow.Truncate(time.Second)) || !a.From.Equal(a.To.Add(-24*time.Hour)) || len(a.Slots) != 288 {
		t.Errorf("default range: %d from %v to %v, %d slots: %.300s", code, a.From, a.To, len(a.Slots), out)
	}
	code, a, _ = v.slots(id, "?from="+url.QueryEscape("2026-04-02T00:00:00+02:00"), v.key)
	if code != 200 || !a.From.Equal(utc("2026-04-01T22:00:00Z")) || !a.To.Equal(utc("2026-04-02T22:00:00Z")) {
		t.Errorf("from alone: %d %v %v", code, a.From, a.To)
	}
	// Exactly 31 days passes the range check: */5 then holds 8928 fire
	// times (refused, naming 5000), an hourly job 744 (answered).
	if code, _, out := v.slots(id, "?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z", v.key); code != 400 || !strings.Contains(out, "5000") {
		t.Errorf("31 days of */5 (8928 fire times): %d %.200s", code, out)
	}
	hourly := v.slotsJob("0 * * * *", "UTC", utc("2026-03-01T00:00:00Z"))
	if code, a, out := v.slots(hourly, "?from=2026-03-01T00:00:00Z&to=2026-04-01T00:00:00Z", v.key); code != 200 || len(a.Slots) != 744 {
		t.Errorf("31 days hourly: %d, %d slots %.200s", code, len(a.Slots), out)
	}

	// Scope: another tenant's key sees nothing; a read-only key may read.
	_, _, otherKey := v.addTenant("other", v.shardID)
	if code, _, _ := v.slots(id, "", otherKey); code != 404 {
		t.Errorf("another tenant: %d, want 404", code)
	}
	ro := v.mustJSON("POST", "/api/v1/admin/api-keys", adminKey, `{"tenant_id":"`+v.tenant+`","read_only":true}`, 201)["key"].(string)
	if code, _, out := v.slots(id, "", ro); code != 200 {
		t.Errorf("read-only key: %d %s", code, out)
	}
	if code, _, _ := v.slots("not-a-job", "", v.key); code != 404 {
		t.Errorf("bad id: %d", code)
	}
}
