//go:build e2e

package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
)

// witnessPath is the host path of a witness file of tenant acme.
func witnessPath(file string) string { return filepath.Join(c.Shared, "www/acme/public", file) }

// poll calls cond every second until it holds; errors (a database coming
// back, a node agent restarting) are retried until the deadline, then fail
// the test with the last one.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after %v (last error: %v)", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// runsBySlot lists a job's runs oldest slot first, retrying while the
// tests' own database connections recover from an outage.
func runsBySlot(t *testing.T, id string) []store.Run {
	t.Helper()
	var runs []store.Run
	poll(t, time.Minute, "list runs", func() (bool, error) {
		var err error
		runs, err = c.Store.ListRuns(context.Background(), id, 1000)
		return err == nil, err
	})
	sort.Slice(runs, func(i, j int) bool { return runs[i].ScheduledAt.Before(runs[j].ScheduledAt) })
	return runs
}

// getJob reads a job, retrying like runsBySlot.
func getJob(t *testing.T, id string) store.CronJob {
	t.Helper()
	var j store.CronJob
	poll(t, time.Minute, "get job", func() (bool, error) {
		var err error
		j, err = c.Store.GetJob(context.Background(), id)
		return err == nil, err
	})
	return j
}

// waitJob waits until a job's row satisfies cond.
func waitJob(t *testing.T, id string, timeout time.Duration, what string, cond func(store.CronJob) bool) store.CronJob {
	t.Helper()
	var j store.CronJob
	poll(t, timeout, fmt.Sprintf("job %s %s", id, what), func() (bool, error) {
		var err error
		j, err = c.Store.GetJob(context.Background(), id)
		return err == nil && cond(j), err
	})
	return j
}

// waitRealRuns waits until every slot of a job in [from, until) has a
// real result (a run nobody witnessed fails later, in harness.CheckExactlyOnce).
func waitRealRuns(t *testing.T, id string, from, until time.Time, timeout time.Duration) {
	t.Helper()
	poll(t, timeout, "real results for every slot "+from.Format(time.TimeOnly)+"–"+until.Format(time.TimeOnly), func() (bool, error) {
		runs, err := c.Store.ListRuns(context.Background(), id, 1000)
		if err != nil {
			return false, err
		}
		got := map[time.Time]bool{}
		for _, r := range runs {
			got[r.ScheduledAt] = harness.RealResult(r.Result)
		}
		for s := from.Truncate(every).Add(every); s.Before(until); s = s.Add(every) {
			if !got[s] {
				return false, fmt.Errorf("slot %s has no real result yet", s.Format(time.TimeOnly))
			}
		}
		return true, nil
	})
}

// dumpOnFailure logs, when the test fails, what each node's journal says
// about the job's units.
func dumpOnFailure(t *testing.T, units ...string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, n := range c.Nodes {
			args := []string{"journalctl", "-q", "--no-pager", "-o", "short-precise", "-n", "200", "-u", "node-agent.service"}
			for _, u := range units {
				args = append(args, "-u", u+".service", "-u", u+".timer")
			}
			out, _ := c.Exec(n, nil, args...)
			t.Logf("journal on %s:\n%s", n, out)
			out, _ = c.Exec(n, nil, "journalctl", "-q", "--no-pager", "-o", "short-precise", "-n", "80", "-p", "warning", "-u", "node-agent.service")
			t.Logf("node agent's warnings on %s:\n%s", n, out)
		}
	})
}

// tenantKey makes an API key of tenant acme.
func tenantKey(t *testing.T) string {
	t.Helper()
	_, token, err := c.Store.CreateAPIKey(context.Background(), c.Tenants["acme"].ID)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// reply is what the API answered.
type reply struct {
	Status     int
	RetryAfter string
	Body       string
}

// apiClient gives up after 45 s: the API bounds every request at 30 s, so
// a call that takes longer hangs.
var apiClient = &http.Client{Timeout: 45 * time.Second}

// call makes one API request with key; an error means no answer at all
// (refused, or hung past the client's timeout).
func call(method, path, key string, body any) (reply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.APIURL+path, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("X-API-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := apiClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Body: string(b)}, nil
}

// spoolLeft lists what a node still holds in its outcome spool (waiting or
// dead).
func spoolLeft(t *testing.T, node string) []string {
	t.Helper()
	var left []string
	for _, d := range []string{"/var/spool/hostcron/outcomes", "/var/spool/hostcron/outcomes/dead"} {
		ents, err := os.ReadDir(filepath.Join(c.Root(node), d))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, e := range ents {
			if !e.IsDir() {
				left = append(left, filepath.Join(d, e.Name()))
			}
		}
	}
	return left
}

// stopJob disables a job through the store and waits until the nodes have
// it, then for a run in flight to report.
func stopJob(t *testing.T, id string) {
	t.Helper()
	if j, err := c.Store.GetJob(context.Background(), id); err == nil && !j.Enabled {
		return
	}
	poll(t, time.Minute, "disable "+id, func() (bool, error) {
		_, err := c.Store.DisableJob(context.Background(), id, 0)
		return err == nil, err
	})
	waitJob(t, id, 2*time.Minute, "disabled", func(j store.CronJob) bool { return j.Status == wire.StatusDisabled })
	time.Sleep(3 * time.Second)
}

// settledWitness stops a job, then reads its witness and its runs once
// every witnessed run has its record (for at most a minute): a job still
// running leaves a run witnessed (its command wrote the line) whose
// outcome is not recorded yet, which is no failure of exactly-once.
func settledWitness(t *testing.T, id, file string) ([]harness.Execution, []store.Run) {
	t.Helper()
	stopJob(t, id)
	var execs []harness.Execution
	var runs []store.Run
	deadline := time.Now().Add(time.Minute)
	for {
		execs, runs = harness.ReadWitness(t, witnessPath(file)), runsBySlot(t, id)
		recorded := map[string]bool{}
		for _, r := range runs {
			recorded[r.RunKey] = true
		}
		missing := 0
		for _, e := range execs {
			if !recorded[e.Key.String()] {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return execs, runs
		}
		time.Sleep(time.Second)
	}
}
