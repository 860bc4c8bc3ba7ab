package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/wire"
)

type fakeTemporal struct{ err error }

func (f fakeTemporal) Check(context.Context) error { return f.err }

func health(t *testing.T, v *env) (int, Health) {
	t.Helper()
	code, out := v.do("GET", "/healthz", "", "")
	var h Health
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("healthz body %s: %v", out, err)
	}
	return code, h
}

func TestHealthz(t *testing.T) {
	for _, tc := range []struct {
		name     string
		temporal error
		oldTask  bool
		code     int
		reasons  []string // substrings, one per reason
	}{
		{"all well", nil, false, 200, nil},
		{"temporal down", errors.New("temporal not connected"), false, 503, []string{"temporal unreachable"}},
		{"outbox stuck", nil, true, 503, []string{"oldest undispatched change"}},
		{"both", errors.New("connection refused"), true, 503, []string{"outbox", "temporal unreachable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnvWith(t, Config{Temporal: fakeTemporal{tc.temporal}, OutboxMaxAge: time.Minute})
			if tc.oldTask {
				v.createJob("")
				if _, err := v.store.Pool().Exec(context.Background(),
					`UPDATE cron_job_tasks SET created_at = now() - interval '5 minutes'`); err != nil {
					t.Fatal(err)
				}
			}
			code, h := health(t, v)
			if code != tc.code || len(h.Reasons) != len(tc.reasons) {
				t.Fatalf("healthz = %d %+v, want %d with %d reasons", code, h, tc.code, len(tc.reasons))
			}
			for i, want := range tc.reasons {
				if !strings.Contains(h.Reasons[i], want) {
					t.Errorf("reason %q does not name %q", h.Reasons[i], want)
				}
			}
			if (code == 200) != (h.Status == "ok") {
				t.Errorf("status %q with code %d", h.Status, code)
			}
		})
	}
}

// TestDatabaseOutageAnswers503: with PostgreSQL refusing connections the
// API answers quickly with 503 and Retry-After, and /healthz names it.
func TestDatabaseOutageAnswers503(t *testing.T) {
	v := newEnv(t)
	ctx := context.Background()
	pool := v.store.Pool()
	db := pool.Config().ConnConfig.Database
	admin, err := pgx.Connect(ctx, os.Getenv(pgtest.EnvDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+db+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	pool.Reset() // drop the open connections; new ones are refused
	start := time.Now()
	req, _ := http.NewRequest("GET", v.srv.URL+"/api/v1/tenants/"+v.tenant+"/cron-jobs", nil)
	req.Header.Set("X-API-Key", v.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("during the outage: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("answer took %s", d)
	}
	v.do("GET", "/api/v1/tenants/"+v.tenant+"/cron-jobs", v.key, "") // the 503 matches the document
	if code, h := health(t, v); code != 503 || len(h.Reasons) == 0 || !strings.Contains(h.Reasons[0], "database unreachable") {
		t.Errorf("healthz during the outage = %d %+v", code, h)
	}
}

func TestDrainAndRemoveNodeRequeueFailedJobs(t *testing.T) {
	v := newEnv(t)
	ctx := context.Background()
	nodes := v.mustJSON("GET", "/api/v1/admin/shards/"+v.shardID+"/nodes", adminKey, "", 200)["nodes"].([]any)
	nodeID := nodes[0].(map[string]any)["id"].(string)
	failed, ok := v.createJob("")["id"].(string), v.createJob("")["id"].(string)
	v.activate(ok)
	if _, err := v.store.Pool().Exec(ctx, `UPDATE cron_jobs SET status = $2, status_message = 'not provisioned on node1' WHERE id = $1`, failed, wire.StatusFailed); err != nil {
		t.Fatal(err)
	}

	n := v.mustJSON("POST", "/api/v1/admin/nodes/"+nodeID+"/drain", adminKey, "", 200)
	if n["draining"] != true || n["requeued_jobs"] != float64(1) {
		t.Errorf("drain answered %v; want draining with 1 job requeued", n)
	}
	job := v.mustJSON("GET", "/api/v1/cron-jobs/"+failed, v.key, "", 200)
	if job["status"] != string(wire.StatusPending) || job["version"] != float64(2) {
		t.Errorf("failed job after drain: status %v version %v; want pending at version 2", job["status"], job["version"])
	}
	if c := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = $2 AND version = 2`, failed, wire.ActionRetry); c != 1 {
		t.Errorf("%d retry tasks queued for the failed job, want 1", c)
	}
	// The change is in the job's trail, with the admin who drained.
	if c := v.count(`SELECT count(*) FROM cron_job_events WHERE cron_job_id = $1 AND action = 'requeued' AND actor = 'admin' AND version = 2`, failed); c != 1 {
		t.Errorf("%d requeued events by the admin at version 2, want 1", c)
	}
	if c := v.count(`SELECT count(*) FROM cron_job_tasks WHERE cron_job_id = $1 AND action = $2`, ok, wire.ActionRetry); c != 0 {
		t.Errorf("an active job was requeued")
	}
	if nodes, _ := v.store.ShardNodeIDs(ctx, v.shardID); len(nodes) != 0 {
		t.Errorf("converge still includes the draining node: %v", nodes)
	}
	if plan, _ := v.store.JobPlan(ctx, failed); len(plan.Nodes) != 0 {
		t.Errorf("provisioning still waits for the draining node: %v", plan.Nodes)
	}

	// The node reported a run; removing it keeps that history.
	if code, _ := v.outcome(ok, time.Now().Truncate(5*time.Minute), 1, string(wire.ResultSuccess)); code != 200 && code != 201 {
		t.Fatalf("outcome: %d", code)
	}
	if code, _ := v.do("DELETE", "/api/v1/admin/nodes/"+nodeID, adminKey, ""); code != 204 {
		t.Fatalf("delete node = %d", code)
	}
	if code, _ := v.do("DELETE", "/api/v1/admin/nodes/"+nodeID, adminKey, ""); code != 404 {
		t.Errorf("deleting it again = %d, want 404", code)
	}
	if code, _ := v.do("POST", "/api/v1/admin/nodes/"+nodeID+"/drain", v.key, ""); code != 403 && code != 404 {
		t.Errorf("a tenant key drained a node: %d", code)
	}
	if c := v.count(`SELECT count(*) FROM cron_job_runs WHERE cron_job_id = $1`, ok); c != 1 {
		t.Errorf("run history of the removed node: %d runs, want 1", c)
	}
	if code, _ := v.outcome(ok, time.Now().Truncate(5*time.Minute).Add(-5*time.Minute), 1, string(wire.ResultSuccess)); code != 401 {
		t.Errorf("the removed node's credential still works: %d", code)
	}
}

type downConverger struct{}

func (downConverger) ConvergeNode(context.Context, string) error {
	return errors.New("temporal not connected")
}

// TestAnnounceWhileTemporalDown: a node announcing itself during a
// Temporal outage gets 503 (it retries), not 500.
func TestAnnounceWhileTemporalDown(t *testing.T) {
	v := newEnvWith(t, Config{Converger: downConverger{}})
	if code, out := v.do("POST", "/internal/v1/nodes/announce", v.node, ""); code != http.StatusServiceUnavailable {
		t.Errorf("announce = %d %s, want 503", code, out)
	}
}
