//go:build e2e

package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/dispatch"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/jobspec"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/tests/harness"
	"github.com/hostcron/hostcron/workflows"
	"go.temporal.io/sdk/client"
)

// Scenario j's sizes: bulkTenants × bulkPerTenant yearly jobs (never due
// during the test, so elections stay idle) plus failing every-5-seconds
// jobs that auto-disable during the race.
const (
	bulkTenants   = 4
	bulkPerTenant = 750 // store.MaxJobsPerTenant is 1000
	failingJobs   = 6
	// releasedCreates of the bulk's create tasks go to their own
	// workflows after the first converge (late, stale applies racing the
	// rest); the others are recorded provisioned by that converge.
	releasedCreates = 100
	// convergeEvery is the periodic converge's interval during the race
	// (core-api's --converge-every; production's is 10 minutes). A
	// converge of every node must fit in it (it is the converge's
	// execution timeout).
	convergeEvery = time.Minute
)

// scaleTenant is one of the scenario's own tenants (uids past the
// harness's).
type scaleTenant struct {
	name string
	uid  int
	t    store.Tenant
	wr   store.Webroot
}

// TestShardRaceAtScale (issue 12, scenario j): 3,006 jobs on one shard of
// three nodes while deletes, edits, disables, enables and auto-disables
// race periodic converges (the converge schedule, every 30 s) and
// announce converges (node agents restarted). The jobs are created
// through the store (the API's transactions, outbox rows included); the
// outbox is held while one converge per node installs them all (one
// reconcile, one daemon-reload, as a shard that grew over time has them).
// 100 of the bulk's create tasks then go to their own workflows, late
// and stale, racing the rest; the others are recorded provisioned. A
// sampler reads every node's specs every few seconds until the end: no
// unit's version may ever go down on a node (reverted), and no deleted
// job's unit may come back once it was gone (resurrected). Once the
// outbox drained and every job settled, every job the core records as
// provisioned (active, disabled) must be on every node at the row's
// version with its timer enabled and active exactly when the job is
// enabled. A job left failed (a node too busy to answer within the node
// timeout) and a delete whose removal timed out are the converge's to
// repair: after one converge of every node, every job must be so, and
// no unit of a deleted job may be left (none dropped, reverted or
// resurrected).
func TestShardRaceAtScale(t *testing.T) {
	ctx := context.Background()
	started := time.Now()
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))

	// The core runs as a replica on the API's address (nodes report to
	// it) with the periodic converge on and an outbox it can hold.
	var holdMu sync.Mutex
	held := make(chan struct{})
	hooks := &dispatch.TestHooks{BeforeClaim: func(ctx context.Context) error {
		holdMu.Lock()
		h := held
		holdMu.Unlock()
		select {
		case <-h:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	release := func() {
		holdMu.Lock()
		defer holdMu.Unlock()
		select {
		case <-held:
		default:
			close(held)
		}
	}
	c.StopAPI()
	replica, err := c.StartReplica(harness.ReplicaOptions{Listen: c.APIAddr(), Name: "scale",
		Housekeeping: &housekeeping.Config{Interval: 5 * time.Second, Grace: grace}, DispatchTestHooks: hooks})
	if err != nil {
		if err2 := c.StartAPI(); err2 != nil {
			t.Errorf("restart core API: %v", err2)
		}
		t.Fatal(err)
	}
	var convergeScheduled bool
	t.Cleanup(func() {
		release()
		if convergeScheduled {
			if err := c.Temporal.ScheduleClient().GetHandle(ctx, "hostcron-converge-all").Delete(ctx); err != nil {
				t.Errorf("delete the converge schedule: %v", err)
			}
		}
		if err := replica.Stop(); err != nil {
			t.Errorf("stop the scenario's core: %v", err)
		}
		if err := c.StartAPI(); err != nil {
			t.Errorf("restart core API: %v", err)
		}
	})

	// Tenants, their Linux users on every node, their webroots.
	var tenants []*scaleTenant
	for i := 0; i < bulkTenants; i++ {
		st := &scaleTenant{name: fmt.Sprintf("scale%d", i+1), uid: 2101 + i}
		tn, err := c.Store.CreateTenant(ctx, store.Tenant{Name: st.name, ShardID: c.ShardID, LinuxUser: st.name, LinuxGroup: st.name})
		if err != nil {
			t.Fatal(err)
		}
		st.t = tn
		if st.wr, err = c.Store.CreateWebroot(ctx, tn.ID, "/srv/shared/www/"+st.name+"/public"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{st.name, st.name + "/public"} {
			dir := filepath.Join(c.Shared, "www", p)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, st.uid, st.uid); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range c.Nodes {
			if out, err := c.Exec(n, nil, "sh", "-c", fmt.Sprintf("getent passwd %[1]s >/dev/null || { groupadd -g %[2]d %[1]s && useradd -u %[2]d -g %[2]d -M -d /srv/shared/www/%[1]s -s /bin/sh %[1]s; }", st.name, st.uid)); err != nil {
				t.Fatalf("tenant user on %s: %v\n%s", n, err, out)
			}
		}
		tenants = append(tenants, st)
	}

	// 3,000 yearly jobs (each its own minute and day, so a schedule edit
	// is a real change) and the failing ones, through the store.
	type made struct{ id, tenant string }
	var (
		mu   sync.Mutex
		bulk []made
	)
	createdAt := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, bulkTenants)
	for _, st := range tenants {
		wg.Add(1)
		go func(st *scaleTenant) {
			defer wg.Done()
			for i := 0; i < bulkPerTenant; i++ {
				j, _, err := c.Store.CreateJob(ctx, st.t.ID, store.JobFields{
					WebrootID: st.wr.ID, Schedule: fmt.Sprintf("%d %d %d %d *", i%60, i%24, 1+i%28, 1+i%12), Timezone: "UTC",
					Command: "echo yearly", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 64, MaxFailures: 5,
				}, nil)
				if err != nil {
					errs <- fmt.Errorf("create job %d of %s: %w", i, st.name, err)
					return
				}
				mu.Lock()
				bulk = append(bulk, made{j.ID, st.name})
				mu.Unlock()
			}
		}(st)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var failing []wire.Job
	for i := 0; i < failingJobs; i++ {
		failing = append(failing, c.NewJob(t, "acme", "*/5 * * * * *", "exit 3", timeout, 64, 2))
	}
	unitOf := map[string]string{} // job id -> unit name
	for _, b := range bulk {
		unitOf[b.id] = wire.UnitName(b.tenant, b.id)
	}
	for _, f := range failing {
		unitOf[f.ID] = f.UnitName()
	}
	t.Logf("%d jobs created through the store in %v (%d bulk on %d tenants, %d failing)",
		len(unitOf), time.Since(createdAt).Round(time.Millisecond), len(bulk), bulkTenants, len(failing))

	// One converge per node installs them (the outbox is held).
	convStart := time.Now()
	convergeAll(t, "first")
	t.Logf("first converge of every node took %v", time.Since(convStart).Round(time.Millisecond))

	// The converge provisioned the bulk. All but releasedCreates of
	// their create tasks are settled as their workflows would have: the
	// task dispatched, the verdict active on every node (SetProvisioned,
	// the workflow's last step). 3,000 create workflows would take some
	// ten minutes on this machine (about 5 signals a second with other
	// tiers beside it), and their applies would change nothing the
	// converge did not.
	released := map[string]bool{}
	for _, b := range bulk[:releasedCreates] {
		released[b.id] = true
	}
	isBulk := map[string]bool{}
	for _, b := range bulk {
		isBulk[b.id] = true
	}
	tasks, err := c.Store.ClaimTasks(ctx, 2*len(unitOf), time.Millisecond) // a lease that is over at once
	if err != nil {
		t.Fatal(err)
	}
	settled := 0
	for _, task := range tasks {
		if !isBulk[task.CronJobID] || released[task.CronJobID] || task.Action != wire.ActionCreate {
			continue
		}
		if err := c.Store.MarkDispatched(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Store.SetProvisioned(ctx, task.CronJobID, task.Version, wire.StatusActive, "", len(c.Nodes)); err != nil {
			t.Fatal(err)
		}
		settled++
	}
	if settled != len(bulk)-releasedCreates {
		t.Fatalf("settled %d create tasks of the bulk, want %d", settled, len(bulk)-releasedCreates)
	}

	// From here on the sampler watches every node.
	smp := newSampler(unitOf)
	var smpMu sync.Mutex // the sampler's deleted func is set after it starts
	smp.sample(t)
	for _, n := range c.Nodes {
		if got := smp.present(n); got < len(unitOf) {
			t.Fatalf("%s has %d of the %d units after its converge", n, got, len(unitOf))
		}
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(3 * time.Second):
				smpMu.Lock()
				smp.sample(t)
				smpMu.Unlock()
			}
		}
	}()
	defer func() {
		select {
		case <-stopSampling:
		default:
			close(stopSampling)
		}
		<-sampled
	}()

	// The race. The outbox opens (3,000 create workflows start), the
	// periodic converge starts, and the tenants change jobs meanwhile.
	release()
	raceStart := time.Now()
	if err := workflows.EnsureConvergeSchedule(ctx, c.Temporal, convergeEvery); err != nil {
		t.Fatal(err)
	}
	convergeScheduled = true

	ids := make([]string, 0, len(bulk))
	for _, b := range bulk {
		ids = append(ids, b.id)
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	take := func(n int) []string { out := ids[:n]; ids = ids[n:]; return out }
	// Deletes and schedule edits rewrite or remove unit files, so each
	// costs every node a daemon-reload of its 6,000 units; command edits,
	// disables and enables do not.
	deletes, edits, cmdEdits, editDeletes := take(40), take(40), take(60), take(20)
	disables, flips := take(50), take(50)

	var deletedMu sync.Mutex
	deleted := map[string]time.Time{} // job id -> when its delete committed
	smpMu.Lock()
	smp.deleted = func() map[string]time.Time {
		deletedMu.Lock()
		defer deletedMu.Unlock()
		out := make(map[string]time.Time, len(deleted))
		for k, v := range deleted {
			out[k] = v
		}
		return out
	}
	smpMu.Unlock()
	var actions []func() error
	for _, id := range deletes {
		actions = append(actions, func() error { return deleteJob(ctx, id, deleted, &deletedMu) })
	}
	for i, id := range edits {
		actions = append(actions, func() error { return editJob(ctx, id, i) })
	}
	for i, id := range cmdEdits {
		actions = append(actions, func() error {
			_, err := c.Store.UpdateJob(ctx, id, 0, func(f store.JobFields) (store.JobFields, error) {
				f.Command = fmt.Sprintf("echo command %d", i)
				return f, nil
			})
			return err
		})
	}
	for i, id := range editDeletes {
		actions = append(actions, func() error {
			if err := editJob(ctx, id, i+7); err != nil {
				return err
			}
			time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
			return deleteJob(ctx, id, deleted, &deletedMu)
		})
	}
	for _, id := range disables {
		actions = append(actions, func() error { _, err := c.Store.DisableJob(ctx, id, 0); return err })
	}
	for _, id := range flips {
		actions = append(actions, func() error {
			if _, err := c.Store.DisableJob(ctx, id, 0); err != nil {
				return err
			}
			time.Sleep(time.Duration(rng.Intn(2000)) * time.Millisecond)
			_, err := c.Store.EnableJob(ctx, id, 0)
			return err
		})
	}
	rng.Shuffle(len(actions), func(i, j int) { actions[i], actions[j] = actions[j], actions[i] })
	// The changes spread over 90 s; node agents restart (announce
	// converges) at 20, 50 and 80 s, each a different node.
	const raceFor = 60 * time.Second
	restarts := map[int]string{15: c.Nodes[0], 35: c.Nodes[1%len(c.Nodes)], 55: c.Nodes[2%len(c.Nodes)]}
	var actErrs []error
	var actWG sync.WaitGroup
	var actMu sync.Mutex
	nextRestart := 0
	for i, act := range actions {
		at := raceStart.Add(raceFor * time.Duration(i) / time.Duration(len(actions)))
		time.Sleep(time.Until(at))
		for sec, n := range restarts {
			if sec > nextRestart && time.Since(raceStart) >= time.Duration(sec)*time.Second {
				nextRestart = sec
				if out, err := c.Exec(n, nil, "systemctl", "restart", "hostcron-node-agent.service"); err != nil {
					t.Errorf("restart the agent on %s: %v\n%s", n, err, out)
				}
				t.Logf("%s: node agent restarted (announce) at +%v", n, time.Since(raceStart).Round(time.Second))
			}
		}
		actWG.Add(1)
		go func() {
			defer actWG.Done()
			if err := act(); err != nil {
				actMu.Lock()
				actErrs = append(actErrs, err)
				actMu.Unlock()
			}
		}()
	}
	actWG.Wait()
	for _, err := range actErrs[:min(5, len(actErrs))] {
		t.Errorf("tenant change: %v", err)
	}
	t.Logf("race: %d deletes, %d schedule+command edits, %d command edits, %d edit+deletes, %d disables, %d disable+enables in %v",
		len(deletes), len(edits), len(cmdEdits), len(editDeletes), len(disables), len(flips), time.Since(raceStart).Round(time.Second))

	// Quiesce: the outbox drained, every job settled (no workflow left
	// to apply anything), the failing jobs auto-disabled.
	tenantIDs := []string{c.Tenants["acme"].ID}
	for _, st := range tenants {
		tenantIDs = append(tenantIDs, st.t.ID)
	}
	var final map[string]store.CronJob
	poll(t, 8*time.Minute, "outbox drained and every job settled", func() (bool, error) {
		if _, pending, err := c.Store.OldestPendingTask(ctx); err != nil || pending {
			return false, fmt.Errorf("outbox not drained (%v)", err)
		}
		jobs, err := listJobs(ctx, tenantIDs, unitOf)
		if err != nil {
			return false, err
		}
		for id, j := range jobs {
			if j.Status == wire.StatusPending || j.Status == wire.StatusDeleting {
				return false, fmt.Errorf("job %s still %s", id, j.Status)
			}
		}
		for _, f := range failing {
			if j, ok := jobs[f.ID]; !ok || j.Status != wire.StatusAutoDisabled {
				return false, fmt.Errorf("failing job %s is %s, not yet auto-disabled", f.ID, j.Status)
			}
		}
		final = jobs
		return true, nil
	})
	settledAt := time.Now()
	t.Logf("settled %v after the race began", settledAt.Sub(raceStart).Round(time.Second))
	// No more periodic converges.
	if err := c.Temporal.ScheduleClient().GetHandle(ctx, "hostcron-converge-all").Delete(ctx); err != nil {
		t.Fatal(err)
	}
	convergeScheduled = false
	statuses := map[wire.Status]int{}
	for _, j := range final {
		statuses[j.Status]++
	}
	t.Logf("database: %d jobs (%v), %d deleted", len(final), statuses, len(deleted))

	// 1. What the core says every node took is on every node: each job
	// active or disabled (a verdict of every node) at the row's version,
	// its timer as the row says. A converge already under way may still
	// be writing: look again for up to a minute. (A failed job's nodes,
	// and a delete whose removal timed out, are the next converge's.)
	provisioned := func(j store.CronJob) bool {
		return j.Status == wire.StatusActive || j.Status == wire.StatusDisabled
	}
	problems, counts := checkUntil(t, time.Minute, final, nil, unitOf, provisioned)
	t.Logf("provisioned jobs on the nodes after the race: %v", counts)
	for _, p := range first(problems, 15) {
		t.Errorf("after the race: %s", p)
	}
	if len(problems) > 15 {
		t.Errorf("... and %d more", len(problems)-15)
	}

	// 2. One converge of every node (what the schedule runs) repairs what
	// provisioning left: then every node holds every job at its version
	// with its timer as the row says, and no unit of a deleted job.
	convStart = time.Now()
	convergeAll(t, "final")
	t.Logf("final converge of every node took %v", time.Since(convStart).Round(time.Second))
	problems, counts = checkUntil(t, 30*time.Second, final, deleted, unitOf, func(store.CronJob) bool { return true })
	close(stopSampling)
	<-sampled
	t.Logf("every job on the nodes after the final converge: %v", counts)
	for _, p := range first(problems, 15) {
		t.Errorf("after the final converge: %s", p)
	}
	if len(problems) > 15 {
		t.Errorf("... and %d more", len(problems)-15)
	}
	t.Logf("sampler: %d samples; %d version decreases, %d resurrections", smp.samples, len(smp.reverted), len(smp.resurrected))
	for _, p := range first(smp.reverted, 10) {
		t.Errorf("reverted: %s", p)
	}
	for _, p := range first(smp.resurrected, 10) {
		t.Errorf("resurrected: %s", p)
	}
	t.Logf("scenario j took %v", time.Since(started).Round(time.Second))
}

// convergeAll converges every node at once, as a node's announce does,
// and waits for each. A converge already running for the
// node (an announce's) is joined; if its set was read before the shard's
// current one (fewer jobs), the node is converged again.
func convergeAll(t *testing.T, what string) {
	t.Helper()
	ctx := context.Background()
	want, err := c.Store.DesiredJobs(ctx, c.ShardID)
	if err != nil {
		t.Fatal(err)
	}
	todo := c.Nodes
	for attempt := 1; len(todo) > 0; attempt++ {
		if attempt > 3 {
			t.Fatalf("%s converge: %v converged three times with fewer than the shard's %d jobs", what, todo, len(want))
		}
		runs := map[string]client.WorkflowRun{}
		for _, n := range todo {
			r, err := workflows.StartConvergeNode(ctx, c.Temporal, c.NodeIDs[n], 3*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			runs[n] = r
		}
		var again []string
		for _, n := range todo {
			var res workflows.ConvergeResult
			if err := runs[n].Get(ctx, &res); err != nil {
				t.Fatalf("%s converge of %s: %v", what, n, err)
			}
			t.Logf("%s converge of %s: %d jobs, %d written, %d removed, %d kept, %d stale, %d failed, %d reloads", what, n,
				res.Jobs, len(res.Written), len(res.Removed), len(res.Kept), len(res.Stale), len(res.Failed), res.Reloads)
			if res.Jobs != len(want) {
				again = append(again, n) // it joined a converge that read an older set
			}
		}
		todo = again
	}
}

// first is at most n of ps.
func first(ps []string, n int) []string { return ps[:min(n, len(ps))] }

// deleteJob deletes a job as the API does and records when it committed.
func deleteJob(ctx context.Context, id string, deleted map[string]time.Time, mu *sync.Mutex) error {
	if _, err := c.Store.DeleteJob(ctx, id, 0); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	mu.Lock()
	deleted[id] = time.Now()
	mu.Unlock()
	return nil
}

// editJob changes a job's schedule (another yearly minute) and command,
// as a PUT merges them.
func editJob(ctx context.Context, id string, i int) error {
	_, err := c.Store.UpdateJob(ctx, id, 0, func(f store.JobFields) (store.JobFields, error) {
		f.Schedule = fmt.Sprintf("%d %d 2 3 *", (i*7)%60, (i*5)%24)
		f.Command = fmt.Sprintf("echo edited %d", i)
		return f, nil
	})
	if err != nil {
		return fmt.Errorf("edit %s: %w", id, err)
	}
	return nil
}

// listJobs reads the scenario's jobs that still exist.
func listJobs(ctx context.Context, tenantIDs []string, ours map[string]string) (map[string]store.CronJob, error) {
	out := map[string]store.CronJob{}
	for _, tid := range tenantIDs {
		js, _, err := c.Store.ListJobs(ctx, tid, store.JobQuery{Limit: 10000})
		if err != nil {
			return nil, err
		}
		for _, j := range js {
			if _, ok := ours[j.ID]; ok {
				out[j.ID] = j
			}
		}
	}
	return out, nil
}

// nodeView is what one node has of the scenario's units.
type nodeView struct {
	spec    map[string]int64 // unit -> spec version
	timer   map[string]bool  // unit -> timer file exists
	service map[string]bool
	enabled map[string]bool // timers.target.wants link
	active  map[string]bool // systemd: timer active
}

func readNode(t *testing.T, n string, units map[string]bool, withSystemd bool) nodeView {
	t.Helper()
	v := nodeView{spec: map[string]int64{}, timer: map[string]bool{}, service: map[string]bool{}, enabled: map[string]bool{}, active: map[string]bool{}}
	root := c.Root(n)
	specDir := filepath.Join(root, "/var/lib/hostcron/jobs")
	ents, err := os.ReadDir(specDir)
	if err != nil {
		t.Errorf("%s: %v", n, err)
		return v
	}
	for _, e := range ents {
		unit, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !units[unit] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(specDir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		var s jobspec.Spec
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		if err != nil {
			t.Errorf("%s: spec %s: %v", n, unit, err)
			continue
		}
		v.spec[unit] = s.Version
	}
	unitDir := filepath.Join(root, "/etc/systemd/system")
	ents, _ = os.ReadDir(unitDir)
	for _, e := range ents {
		if u, ok := strings.CutSuffix(e.Name(), ".timer"); ok && units[u] {
			v.timer[u] = true
		} else if u, ok := strings.CutSuffix(e.Name(), ".service"); ok && units[u] {
			v.service[u] = true
		}
	}
	ents, _ = os.ReadDir(filepath.Join(unitDir, "timers.target.wants"))
	for _, e := range ents {
		if u, ok := strings.CutSuffix(e.Name(), ".timer"); ok && units[u] {
			v.enabled[u] = true
		}
	}
	if withSystemd {
		out, err := c.Exec(n, nil, "systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "cron-*.timer")
		if err != nil {
			t.Errorf("%s: list timers: %v\n%s", n, err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 {
				if u, ok := strings.CutSuffix(f[0], ".timer"); ok && units[u] && f[2] == "active" {
					v.active[u] = true
				}
			}
		}
	}
	return v
}

// checkUntil runs checkNodes until it finds nothing or for d.
func checkUntil(t *testing.T, d time.Duration, final map[string]store.CronJob, deleted map[string]time.Time, unitOf map[string]string, check func(store.CronJob) bool) ([]string, map[string]int) {
	deadline := time.Now().Add(d)
	for {
		problems, counts := checkNodes(t, final, deleted, unitOf, check)
		if len(problems) == 0 || time.Now().After(deadline) {
			return problems, counts
		}
		time.Sleep(5 * time.Second)
	}
}

// checkNodes holds every node against the database's final state: the
// jobs check selects, and the deleted ones.
func checkNodes(t *testing.T, final map[string]store.CronJob, deleted map[string]time.Time, unitOf map[string]string, check func(store.CronJob) bool) ([]string, map[string]int) {
	units := map[string]bool{}
	for _, u := range unitOf {
		units[u] = true
	}
	var problems []string
	counts := map[string]int{}
	for _, n := range c.Nodes {
		v := readNode(t, n, units, true)
		for id, j := range final {
			if !check(j) {
				continue
			}
			u := unitOf[id]
			ver, ok := v.spec[u]
			switch {
			case !ok || !v.timer[u] || !v.service[u]:
				problems = append(problems, fmt.Sprintf("%s: %s (v%d, %s) dropped: spec %v timer %v service %v", n, u, j.Version, j.Status, ok, v.timer[u], v.service[u]))
				continue
			case ver < j.Version:
				problems = append(problems, fmt.Sprintf("%s: %s at v%d, the database's is v%d (%s): reverted or not applied", n, u, ver, j.Version, j.Status))
				continue
			case ver > j.Version:
				problems = append(problems, fmt.Sprintf("%s: %s at v%d, above the database's v%d", n, u, ver, j.Version))
				continue
			}
			if j.Enabled {
				if !v.enabled[u] || !v.active[u] {
					problems = append(problems, fmt.Sprintf("%s: %s enabled at v%d but timer enabled %v active %v", n, u, j.Version, v.enabled[u], v.active[u]))
					continue
				}
				counts[n+" enabled"]++
			} else {
				if v.enabled[u] || v.active[u] {
					problems = append(problems, fmt.Sprintf("%s: %s %s at v%d but timer enabled %v active %v", n, u, j.Status, j.Version, v.enabled[u], v.active[u]))
					continue
				}
				counts[n+" disabled"]++
			}
		}
		for id := range deleted {
			u := unitOf[id]
			if _, ok := final[id]; ok {
				problems = append(problems, fmt.Sprintf("job %s was deleted but its row is still there", id))
				continue
			}
			if _, ok := v.spec[u]; ok || v.timer[u] || v.service[u] {
				problems = append(problems, fmt.Sprintf("%s: deleted %s still has spec %v timer %v service %v", n, u, ok, v.timer[u], v.service[u]))
				continue
			}
			counts[n+" gone"]++
		}
	}
	sort.Strings(problems)
	return problems, counts
}

// sampler watches every node's spec versions while the race runs.
type sampler struct {
	unitOf      map[string]string
	units       map[string]bool
	idOf        map[string]string
	max         map[string]int64 // node/unit -> highest version seen
	gone        map[string]bool  // node/unit -> seen absent after its delete
	last        map[string]map[string]int64
	samples     int
	reverted    []string
	resurrected []string
	deleted     func() map[string]time.Time
}

func newSampler(unitOf map[string]string) *sampler {
	s := &sampler{unitOf: unitOf, units: map[string]bool{}, idOf: map[string]string{}, max: map[string]int64{},
		gone: map[string]bool{}, last: map[string]map[string]int64{}}
	for id, u := range unitOf {
		s.units[u], s.idOf[u] = true, id
	}
	return s
}

// present counts a node's units in the last sample.
func (s *sampler) present(n string) int { return len(s.last[n]) }

func (s *sampler) sample(t *testing.T) {
	at := time.Now()
	var deleted map[string]time.Time
	if s.deleted != nil {
		deleted = s.deleted()
	}
	for _, n := range c.Nodes {
		v := readNode(t, n, s.units, false)
		for u, ver := range v.spec {
			k := n + "/" + u
			if m, ok := s.max[k]; ok && ver < m {
				s.reverted = append(s.reverted, fmt.Sprintf("%s: %s went from v%d to v%d at %s", n, u, m, ver, at.Format(time.TimeOnly)))
			}
			if ver > s.max[k] {
				s.max[k] = ver
			}
			if s.gone[k] {
				s.resurrected = append(s.resurrected, fmt.Sprintf("%s: %s (deleted) back at v%d at %s", n, u, ver, at.Format(time.TimeOnly)))
				s.gone[k] = false
			}
		}
		for id, when := range deleted {
			u := s.unitOf[id]
			if _, ok := v.spec[u]; !ok && when.Before(at) {
				s.gone[n+"/"+u] = true
			}
		}
		s.last[n] = v.spec
	}
	s.samples++
}
