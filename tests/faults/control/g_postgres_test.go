//go:build e2e

package control

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// pgOutage is how long PostgreSQL is down.
const pgOutage = 3 * time.Minute

// TestPostgresDown (issue 12, scenario g): the core's PostgreSQL (this
// tier's own) is stopped for three minutes while a 10-second job runs and
// a tenant keeps calling the API. Throughout, the API answers (no hang,
// no 500): tenant calls get 503 with Retry-After, /healthz 503 degraded
// naming the database. The nodes spool the outcomes the API could not
// take; once the database is back, without restarting anything, every
// slot of the outage has one record with its witnessed real result, the
// spools are empty, /healthz is ok again, and a change made then reaches
// the nodes.
func TestPostgresDown(t *testing.T) {
	const file = "postgres.log"
	key := tenantKey(t)
	tenant := c.Tenants["acme"].ID
	job := c.NewJob(t, "acme", "*/10 * * * * *", harness.WitnessCommand(file, ""), timeout, 64, 2)
	dumpOnFailure(t, job.UnitName())
	t.Cleanup(func() { stopJob(t, job.ID) })
	waitJob(t, job.ID, 2*time.Minute, "active", func(j store.CronJob) bool { return j.Status == wire.StatusActive })
	poll(t, time.Minute, "two witnessed runs", func() (bool, error) { return len(harness.ReadWitness(t, witnessPath(file))) >= 2, nil })

	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := c.StartPostgres(); err != nil {
				t.Errorf("restart postgres: %v", err)
			}
		}
	})
	if err := c.StopPostgres(); err != nil {
		t.Fatal(err)
	}
	downAt := time.Now()
	t.Logf("PostgreSQL stopped at %s", downAt.Format(time.TimeOnly))

	// Tenants keep calling: reads, a change, a run-now; and /healthz.
	calls := []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/cron-jobs/" + job.ID, nil},
		{"GET", "/api/v1/tenants/" + tenant + "/cron-jobs", nil},
		{"GET", "/api/v1/cron-jobs/" + job.ID + "/runs?limit=5", nil},
		{"PUT", "/api/v1/cron-jobs/" + job.ID, map[string]any{"timeout_seconds": 6}},
		{"POST", "/api/v1/cron-jobs/" + job.ID + "/run-now", nil},
	}
	answered := 0
	for i := 0; time.Since(downAt) < pgOutage; i++ {
		cl := calls[i%len(calls)]
		r, err := call(cl.method, cl.path, key, cl.body)
		switch {
		case err != nil:
			t.Errorf("%s %s during the outage: no answer: %v", cl.method, cl.path, err)
		case r.Status != 503 || r.RetryAfter == "":
			t.Errorf("%s %s during the outage: %d (Retry-After %q) %s; want 503 with Retry-After", cl.method, cl.path, r.Status, r.RetryAfter, r.Body)
		default:
			answered++
		}
		h, err := call("GET", "/healthz", "", nil)
		var health api.Health
		switch {
		case err != nil:
			t.Errorf("/healthz during the outage: no answer: %v", err)
		case h.Status != 503 || json.Unmarshal([]byte(h.Body), &health) != nil || health.Status != "degraded" ||
			!strings.Contains(strings.Join(health.Reasons, ";"), "database"):
			t.Errorf("/healthz during the outage: %d %s; want 503 degraded naming the database", h.Status, h.Body)
		}
		time.Sleep(3 * time.Second)
	}
	if err := c.StartPostgres(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	upAt := time.Now()
	t.Logf("PostgreSQL back at %s; %d tenant calls answered 503 with Retry-After", upAt.Format(time.TimeOnly), answered)

	// Nothing restarted: the API recovers on its own.
	poll(t, 2*time.Minute, "/healthz ok again", func() (bool, error) {
		h, err := call("GET", "/healthz", "", nil)
		if err != nil {
			return false, err
		}
		if h.Status != 200 {
			return false, fmt.Errorf("/healthz %d %s", h.Status, h.Body)
		}
		return true, nil
	})
	poll(t, time.Minute, "tenant API answers again", func() (bool, error) {
		r, err := call("GET", "/api/v1/cron-jobs/"+job.ID, key, nil)
		if err != nil {
			return false, err
		}
		if r.Status != 200 {
			return false, fmt.Errorf("GET job %d %s", r.Status, r.Body)
		}
		return true, nil
	})
	// Every outcome of the outage arrives from the spools.
	waitRealRuns(t, job.ID, downAt, upAt, 2*time.Minute)
	for _, n := range c.Nodes {
		poll(t, time.Minute, n+"'s spool drained", func() (bool, error) { return len(spoolLeft(t, n)) == 0, nil })
	}
	// A change made now reaches the nodes: dispatcher, workflows and node
	// agents recovered. (A run-now: PUT validates the whole job, and this
	// one's seconds field is only for the tests' store.)
	r, err := call("POST", "/api/v1/cron-jobs/"+job.ID+"/run-now", key, nil)
	if err != nil || r.Status != 202 {
		t.Fatalf("run-now after the outage: %v %d %s", err, r.Status, r.Body)
	}
	poll(t, 2*time.Minute, "the run-now after the outage ran", func() (bool, error) {
		for _, e := range harness.ReadWitness(t, witnessPath(file)) {
			if e.Key.Trigger == wire.TriggerManual {
				return true, nil
			}
		}
		return false, nil
	})
	stopJob(t, job.ID)

	runs := runsBySlot(t, job.ID)
	harness.CheckExactlyOnce(t, harness.ReadWitness(t, witnessPath(file)), runs)
	inOutage, lost, manual := 0, 0, 0
	for _, r := range runs {
		if r.ScheduledAt.After(downAt) && r.ScheduledAt.Before(upAt) {
			inOutage++
		}
		if r.Result == wire.ResultLost {
			lost++
			t.Errorf("slot %s is lost: an outcome of the outage was not delivered", r.ScheduledAt.Format(time.TimeOnly))
		}
		if strings.Contains(r.RunKey, "#manual#") {
			manual++
			if r.ReceivedAt.Before(upAt) {
				t.Errorf("run-now %s recorded at %s, during the outage", r.RunKey, r.ReceivedAt.Format(time.TimeOnly))
			}
		}
	}
	if manual != 1 {
		t.Errorf("%d run-now records, want the one asked for after the outage (those refused with 503 must not run)", manual)
	}
	var scheduled []store.Run
	for _, r := range runs {
		if r.RunKey == "" || !strings.Contains(r.RunKey, "#manual#") {
			scheduled = append(scheduled, r)
		}
	}
	runs = scheduled
	first, last := runs[0].ScheduledAt, runs[len(runs)-1].ScheduledAt
	if want := int(last.Sub(first)/every) + 1; len(runs) != want {
		t.Errorf("%d run records for %d slots between %s and %s", len(runs), want, first.Format(time.TimeOnly), last.Format(time.TimeOnly))
	}
	if want := int(pgOutage/every) - 1; inOutage < want {
		t.Errorf("%d slots of the outage recorded, want at least %d", inOutage, want)
	}
	t.Logf("%d slots, %d during the %v outage, all delivered from the spools", len(runs), inOutage, pgOutage)
}
