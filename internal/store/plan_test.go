package store_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// shard is a shard with its nodes (created in the order given) and one
// tenant with a webroot.
type shard struct {
	id      string
	nodes   map[string]string // name → id
	tenant  string
	webroot string
}

func newShard(t *testing.T, st *store.Store, name string, nodes ...string) shard {
	t.Helper()
	ctx := context.Background()
	sh, err := st.CreateShard(ctx, name, "/srv/"+name)
	if err != nil {
		t.Fatal(err)
	}
	s := shard{id: sh.ID, nodes: map[string]string{}}
	for _, n := range nodes {
		node, _, err := st.CreateNode(ctx, sh.ID, n)
		if err != nil {
			t.Fatal(err)
		}
		s.nodes[n] = node.ID
	}
	tn, err := st.CreateTenant(ctx, store.Tenant{Name: "t" + name, ShardID: sh.ID, LinuxUser: "t" + name, LinuxGroup: "t" + name})
	if err != nil {
		t.Fatal(err)
	}
	wr, err := st.CreateWebroot(ctx, tn.ID, "/srv/"+name+"/t"+name+"/public")
	if err != nil {
		t.Fatal(err)
	}
	s.tenant, s.webroot = tn.ID, wr.ID
	return s
}

func (s shard) job(t *testing.T, st *store.Store, command string) store.CronJob {
	t.Helper()
	j, _, err := st.CreateJob(context.Background(), s.tenant, store.JobFields{WebrootID: s.webroot, Schedule: "*/5 * * * *",
		Timezone: "Europe/Berlin", Command: command, Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 128, MaxFailures: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestJobPlan: one statement yields the job exactly as a converge would
// send it, its deleting state and its own shard's nodes by name.
func TestJobPlan(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node2", "node1", "node3")
	b := newShard(t, st, "web2", "other")
	bare := newShard(t, st, "web3") // no nodes yet
	j := a.job(t, st, "php artisan schedule:run")
	b.job(t, st, "true")
	lonely := bare.job(t, st, "true")

	p, err := st.JobPlan(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	desired, err := st.DesiredJobs(ctx, a.id)
	if err != nil {
		t.Fatal(err)
	}
	if len(desired) != 1 || !reflect.DeepEqual(p.Job, desired[0]) {
		t.Errorf("plan's job %+v\nis not the converge's %+v", p.Job, desired)
	}
	if p.Job.Command != "php artisan schedule:run" || p.Job.Tenant != "tweb1" || p.Job.WebStorageDir != "/srv/web1" {
		t.Errorf("plan's job %+v", p.Job)
	}
	wantNodes := []wire.NodeRef{{ID: a.nodes["node1"], Name: "node1"}, {ID: a.nodes["node2"], Name: "node2"}, {ID: a.nodes["node3"], Name: "node3"}}
	if !p.Exists || p.Deleting || p.Version != j.Version || !reflect.DeepEqual(p.Nodes, wantNodes) {
		t.Errorf("plan %+v, want exists, not deleting, version %d, nodes %v", p, j.Version, wantNodes)
	}

	if p, err = st.JobPlan(ctx, lonely.ID); err != nil || !p.Exists || len(p.Nodes) != 0 {
		t.Errorf("job of a shard without nodes: %+v, %v", p, err)
	}

	del, err := st.DeleteJob(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = st.JobPlan(ctx, j.ID); err != nil || !p.Exists || !p.Deleting || p.Version != del.Version || len(p.Nodes) != 3 {
		t.Errorf("plan of a job being deleted: %+v, %v", p, err)
	}
	if err := st.FinishDelete(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if p, err = st.JobPlan(ctx, j.ID); err != nil || p.Exists {
		t.Errorf("plan of a deleted job: %+v, %v; want Exists=false and no error", p, err)
	}
}

func TestNodeDesiredJobs(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	b := newShard(t, st, "web2", "other")
	keep := a.job(t, st, "keep")
	gone := a.job(t, st, "gone")
	b.job(t, st, "elsewhere")
	if _, err := st.DeleteJob(ctx, gone.ID, 0); err != nil {
		t.Fatal(err)
	}
	set, ok, err := st.NodeDesiredJobs(ctx, a.nodes["node1"])
	if err != nil || !ok || len(set.Jobs) != 1 || set.Jobs[0].ID != keep.ID {
		t.Errorf("node1's desired jobs: %+v, %v, %v; want only %s", set.Jobs, ok, err, keep.ID)
	}
	if set.Snapshot.Xmin == 0 || !set.Snapshot.Sees(set.Jobs[0].Rev) {
		t.Errorf("snapshot %+v does not see the committed write %d of the job it lists", set.Snapshot, set.Jobs[0].Rev)
	}
	if _, ok, err := st.NodeDesiredJobs(ctx, "00000000-0000-0000-0000-000000000000"); err != nil || ok {
		t.Errorf("unknown node: ok=%v, err=%v; want not ok and no error", ok, err)
	}
	ids, err := st.ShardNodeIDs(ctx, b.id)
	if err != nil || !reflect.DeepEqual(ids, []string{b.nodes["other"]}) {
		t.Errorf("shard web2's nodes: %v, %v", ids, err)
	}
}
