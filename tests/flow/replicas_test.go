//go:build e2e

package flow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/hostcron/hostcron/internal/dispatch"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/runkey"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
	"github.com/hostcron/hostcron/workflows"
)

// killPoint is the dispatchers' AfterSignal fault point: armed for one
// job, the first replica whose dispatcher sends that job's run_now task
// blocks right after Temporal accepted the signal, before it marks the
// row, until the replica is stopped ("killed" there). It never marks it.
type killPoint struct {
	job   atomic.Value // string: the job whose run_now is the victim
	armed atomic.Bool
	hit   chan kill
}

type kill struct {
	replica string
	task    store.Task
}

func (k *killPoint) hooks(replica string) *dispatch.TestHooks {
	return &dispatch.TestHooks{AfterSignal: func(ctx context.Context, task store.Task) error {
		if job, _ := k.job.Load().(string); task.CronJobID != job || task.Action != wire.ActionRunNow || !k.armed.CompareAndSwap(true, false) {
			return nil
		}
		k.hit <- kill{replica: replica, task: task}
		<-ctx.Done() // the replica dies here, its row sent but not marked
		return ctx.Err()
	}}
}

// TestReplicaKilledBetweenSignalAndMark is scenario (i) of issue 12: two
// core-api replicas on one PostgreSQL and one Temporal; one dies between
// Temporal accepting a run-now's signal and marking the outbox row.
// Must hold: the run-now runs once (witness file on shared storage), each
// change is applied once on every node (the job workflow ignores the
// redelivered task id), the stuck row does not stall other jobs, and the
// lost-run sweep, led by one replica at a time, records each slot once,
// across the death of its leader's session too.
func TestReplicaKilledBetweenSignalAndMark(t *testing.T) {
	// The cluster's own core steps aside for two replicas: A on its
	// address (the nodes report outcomes there, the tests call it), B on
	// another port.
	addr := c.APIAddr()
	c.StopAPI()
	kp := &killPoint{hit: make(chan kill, 1)}
	hk := func() *housekeeping.Config {
		return &housekeeping.Config{Interval: 2 * time.Second, Grace: 5 * time.Second,
			Leader: store.LeaderConfig{Keepalive: 500 * time.Millisecond, ConfirmTimeout: time.Second}}
	}
	replicas := map[string]*harness.Replica{}
	start := func(name, listen string) {
		t.Helper()
		r, err := c.StartReplica(harness.ReplicaOptions{Name: name, Listen: listen, Housekeeping: hk(), DispatchTestHooks: kp.hooks(name)})
		if err != nil {
			t.Fatal(err)
		}
		replicas[name] = r
	}
	t.Cleanup(func() {
		for _, r := range replicas {
			_ = r.Stop()
		}
		if err := c.StartAPI(); err != nil {
			t.Errorf("restart the cluster's core: %v", err)
		}
	})
	start("A", addr)
	start("B", "")

	// A job of a shard without nodes that was on nodes once (they all
	// died): every slot since `from` is lost, recorded by the sweep.
	ghost, from := ghostJob(t)

	const witness = "replicas-witness"
	witnessPath := filepath.Join(c.Shared, "www", "acme", "public", witness)
	_ = os.Remove(witnessPath)
	body := fmt.Sprintf(`{"webroot_id":%q,"schedule":"0 3 * * *","command":"echo \"$(hostname) $HOSTCRON_RUN_KEY\" >> %s"}`,
		c.Webroots["acme"].ID, witness)
	job := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", body, 201)["id"].(string)
	waitStatus(t, job, "active", 60*time.Second)

	kp.job.Store(job)
	kp.armed.Store(true)
	call(t, "POST", "/api/v1/cron-jobs/"+job+"/run-now", "", 202)
	var k kill
	select {
	case k = <-kp.hit:
	case <-time.After(30 * time.Second):
		t.Fatal("no replica sent the run-now")
	}
	t.Logf("replica %s dies after Temporal accepted task %d, before marking it", k.replica, k.task.ID)
	runNowKey := runkey.Manual(job, fmt.Sprint(k.task.ID))

	// While the row is stuck (leased by a dead replica): a change of the
	// same job waits behind it, other jobs go on.
	call(t, "PUT", "/api/v1/cron-jobs/"+job, `{"timeout_seconds":120}`, 200)
	if dispatched(t, job, wire.ActionUpdate) {
		t.Error("the job's next change went out before the stuck run-now was marked (per-job order)")
	}
	// Active well within the stuck row's 30 s lease: nothing waited for it.
	took, _ := waitStatus(t, createJob(t, "0 4 * * *"), "active", 25*time.Second)
	t.Logf("another job was active %v after its create, while the row was stuck", took.Round(time.Millisecond))

	// The signal was accepted: the run-now runs, once.
	waitWitness(t, witnessPath, 1, 60*time.Second)

	// Kill the stuck replica (its hook returns only as it stops, and it
	// does not mark); if it was A, a new replica takes A's address, as a
	// restarted process would.
	if err := replicas[k.replica].Stop(); err != nil {
		t.Logf("stop %s: %v", k.replica, err)
	}
	delete(replicas, k.replica)
	if k.replica == "A" {
		start("A2", addr)
	}

	// The survivor sends the row again once its lease ran out, then the
	// job's next change; the job ends active at the newest version.
	deadline := time.Now().Add(90 * time.Second)
	for !dispatched(t, job, wire.ActionRunNow) || !dispatched(t, job, wire.ActionUpdate) {
		if time.Now().After(deadline) {
			t.Fatal("the stuck run-now or the change behind it was never dispatched")
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, j := waitStatus(t, job, "active", 60*time.Second)
	if j["timeout_seconds"] != float64(120) {
		t.Errorf("job after the change: %v", j)
	}
	time.Sleep(10 * time.Second) // a second run, if there were one, would have started by now

	lines := waitWitness(t, witnessPath, 1, 0)
	if !strings.HasSuffix(lines[0], " "+runNowKey) {
		t.Errorf("witness %q, want the run-now's key %s", lines[0], runNowKey)
	}
	runs := c.WaitRuns(t, job, 60*time.Second, func(rs []store.Run) bool { return len(rs) >= 1 })
	if len(runs) != 1 || runs[0].RunKey != runNowKey || runs[0].Result != wire.ResultSuccess {
		t.Errorf("run history %+v, want one successful run %s", runs, runNowKey)
	}

	// The workflow saw four signals (create, run-now, its redelivery,
	// update) and acted on three: three provisionings on every node, one
	// RunNow.
	signals, acts := workflowHistory(t, job)
	nodes := len(c.Nodes)
	if signals != 4 || acts["ApplyJobs"] != 3*nodes || acts["RunNow"] != 1 {
		t.Errorf("job workflow: %d signals, activities %v; want 4 signals, %d ApplyJobs, 1 RunNow", signals, acts, 3*nodes)
	}

	// The sweep: the housekeeping leader's session is terminated; the
	// lead moves and the next slots are still swept, each once.
	killSweepLeader(t)
	checkGhostSweep(t, ghost, from, 80*time.Second)
}

// ghostJob makes an every-minute job on a shard without nodes, active and
// swept up to five minutes ago, as if its nodes had all died then.
func ghostJob(t *testing.T) (string, time.Time) {
	t.Helper()
	ctx := context.Background()
	sh, err := c.Store.CreateShard(ctx, "web-ghost", "/srv/shared/ghost")
	must(t, err)
	tn, err := c.Store.CreateTenant(ctx, store.Tenant{Name: "ghost", ShardID: sh.ID, LinuxUser: "ghost", LinuxGroup: "ghost"})
	must(t, err)
	wr, err := c.Store.CreateWebroot(ctx, tn.ID, "/srv/shared/ghost/ghost/public")
	must(t, err)
	j, _, err := c.Store.CreateJob(ctx, tn.ID, store.JobFields{WebrootID: wr.ID, Schedule: "* * * * *", Timezone: "UTC",
		Command: "true", Enabled: true, TimeoutSeconds: 10, MaxMemoryMB: 64}, nil)
	must(t, err)
	from := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
	_, err = c.Store.Pool().Exec(ctx, `UPDATE cron_jobs SET status = 'active', swept_until = $2, not_before = $2 WHERE id = $1`, j.ID, from)
	must(t, err)
	return j.ID, from
}

// killSweepLeader terminates the backend of the replica that leads
// housekeeping.
func killSweepLeader(t *testing.T) {
	t.Helper()
	var pid int32
	deadline := time.Now().Add(30 * time.Second)
	for pid == 0 {
		err := c.Store.Pool().QueryRow(context.Background(), `SELECT coalesce((SELECT pid FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND granted AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = $1), 0)`, int64(store.HousekeepingLeader)).Scan(&pid)
		must(t, err)
		if pid == 0 && time.Now().After(deadline) {
			t.Fatal("no replica leads housekeeping")
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err := c.Store.Pool().Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	must(t, err)
	t.Logf("terminated the housekeeping leader's session %d", pid)
}

// checkGhostSweep waits until the slot that ended (timeout + grace) ago
// `wait` from now is swept, then checks every minute since from has one
// lost row, no more.
func checkGhostSweep(t *testing.T, id string, from time.Time, wait time.Duration) {
	t.Helper()
	until := time.Now().Add(wait - 20*time.Second).Truncate(time.Minute)
	runs := c.WaitRuns(t, id, wait+30*time.Second, func(rs []store.Run) bool {
		return len(rs) > 0 && !rs[0].ScheduledAt.Before(until)
	})
	perSlot := map[time.Time]int{}
	for _, r := range runs {
		if r.Result != wire.ResultLost {
			t.Errorf("ghost job run %s: %s, want lost", r.RunKey, r.Result)
		}
		perSlot[r.ScheduledAt.UTC()]++
	}
	for s := from.Add(time.Minute); !s.After(until); s = s.Add(time.Minute) {
		if perSlot[s] != 1 {
			t.Errorf("slot %s: %d lost rows, want 1", s.Format(time.TimeOnly), perSlot[s])
		}
	}
	t.Logf("ghost job: %d lost rows for the slots %s – %s", len(runs), from.Format(time.TimeOnly), until.Format(time.TimeOnly))
}

// dispatched reports whether the job's (newest) outbox task of action went out.
func dispatched(t *testing.T, job string, action wire.Action) bool {
	t.Helper()
	var ok bool
	err := c.Store.Pool().QueryRow(context.Background(), `SELECT coalesce((SELECT dispatched_at IS NOT NULL FROM cron_job_tasks
		WHERE cron_job_id = $1 AND action = $2 ORDER BY id DESC LIMIT 1), false)`, job, action).Scan(&ok)
	must(t, err)
	return ok
}

// waitWitness waits until the witness file has want lines (timeout 0:
// checks once) and fails if it has more.
func waitWitness(t *testing.T, path string, want int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) > want {
			t.Fatalf("witness has %d lines, want %d: %q", len(lines), want, lines)
		}
		if len(lines) == want {
			return lines
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("witness has %d lines after %v, want %d", len(lines), timeout, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// workflowHistory counts the signals and the scheduled activities (by
// type) of the job's workflow's current run.
func workflowHistory(t *testing.T, job string) (signals int, activities map[string]int) {
	t.Helper()
	activities = map[string]int{}
	it := c.Temporal.GetWorkflowHistory(context.Background(), workflows.JobWorkflowID(job), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		must(t, err)
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
			signals++
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			activities[ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()]++
		}
	}
	return signals, activities
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
