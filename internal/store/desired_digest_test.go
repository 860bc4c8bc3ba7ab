package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
)

// nodeSide reads a node's set in pages of limit jobs as a node does: each
// page travels as JSON (marshalled as the API serves it, unmarshalled
// into a wire.DesiredPage) before it is assembled.
func nodeSide(t *testing.T, st *store.Store, node string, limit int) wire.DesiredSet {
	t.Helper()
	set, err := desiredset.Assemble(context.Background(), func(ctx context.Context, after string) (wire.DesiredPage, error) {
		p, ok, err := st.NodeDesiredPage(ctx, node, after, limit)
		if err != nil || !ok {
			t.Fatalf("page after %q: ok=%v, %v", after, ok, err)
		}
		body, err := json.Marshal(p)
		if err != nil {
			return wire.DesiredPage{}, err
		}
		var got wire.DesiredPage
		err = json.Unmarshal(body, &got)
		return got, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// The core's digest of a node's set is the one the node computes from the
// pages it read (after their JSON round trip), whatever the page size:
// jobs disabled, with an environment, with a not_before in any zone, and
// without those being deleted. It changes with a job, and with what a job
// takes from outside its row (the tenant's user, the webroot's path), and
// not with another shard's jobs.
func TestNodeDesiredDigestIsThePagesDigest(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	b := newShard(t, st, "web2", "other")
	node := a.nodes["node1"]

	plain := a.job(t, st, "plain")
	disabled := a.job(t, st, "disabled")
	if _, err := st.UpdateJob(ctx, disabled.ID, 0, func(f store.JobFields) (store.JobFields, error) { f.Enabled = false; return f, nil }); err != nil {
		t.Fatal(err)
	}
	env, _, err := st.CreateJob(ctx, a.tenant, store.JobFields{WebrootID: a.webroot, Schedule: "*/5 * * * *",
		Timezone: "Europe/Berlin", Command: "env", Enabled: true, TimeoutSeconds: 60, MaxMemoryMB: 128, MaxFailures: 3,
		Environment: map[string]string{"B": "2", "A": "1 \u00e9\"\n", "APP_ENV": "production"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A not_before written with an offset and sub-second digits, read
	// back in the core's local zone, served with its offset.
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = '2026-03-29 03:30:00.123456+02' WHERE id = $1`, plain.ID); err != nil {
		t.Fatal(err)
	}
	doomed := a.job(t, st, "doomed")
	if _, err := st.DeleteJob(ctx, doomed.ID, 0); err != nil {
		t.Fatal(err)
	}

	// check asserts the core's digest is the node's for page sizes 1 and
	// 1000 and returns it.
	// It also asserts the core computed the digest afresh (a cache
	// miss) if and only if fresh is true, and that asking again at once
	// answers the same digest from the cache.
	check := func(when string, fresh bool) wire.DesiredDigest {
		t.Helper()
		misses := st.DigestMisses()
		d, ok, err := st.NodeDesiredDigest(ctx, node)
		if err != nil || !ok {
			t.Fatalf("%s: digest ok=%v, %v", when, ok, err)
		}
		if computed := st.DigestMisses() > misses; computed != fresh {
			t.Errorf("%s: digest computed afresh %v, want %v", when, computed, fresh)
		}
		misses = st.DigestMisses()
		if again, _, err := st.NodeDesiredDigest(ctx, node); err != nil || again != d || st.DigestMisses() != misses {
			t.Errorf("%s: asked again: %+v, %v, computed afresh %v; want %+v from the cache", when, again, err, st.DigestMisses() != misses, d)
		}
		for _, limit := range []int{1, 1000} {
			set := nodeSide(t, st, node, limit)
			if got := wire.SetDigest(set.Jobs); got != d.Digest || len(set.Jobs) != d.Jobs {
				t.Errorf("%s, pages of %d: the node's digest %s of %d jobs, the core's %s of %d", when, limit, got, len(set.Jobs), d.Digest, d.Jobs)
			}
		}
		return d
	}

	first := check("created", true)
	if first.Jobs != 3 {
		t.Errorf("digest of %d jobs, want 3 (plain, disabled, env; not the one being deleted)", first.Jobs)
	}
	set := nodeSide(t, st, node, 1000)
	byID := map[string]wire.Job{}
	for _, j := range set.Jobs {
		byID[j.ID] = j
	}
	if _, ok := byID[doomed.ID]; ok {
		t.Error("the job being deleted is in the set")
	}
	if j := byID[disabled.ID]; j.ID == "" || j.Enabled {
		t.Errorf("disabled job %+v: want it listed, disabled", j)
	}
	if j := byID[env.ID]; len(j.Environment) != 3 {
		t.Errorf("job with an environment %+v: want its 3 variables", j)
	}
	if nb := byID[plain.ID].NotBefore; !nb.Equal(time.Date(2026, 3, 29, 1, 30, 0, 123456000, time.UTC)) {
		t.Errorf("not_before %s, want 2026-03-29T01:30:00.123456Z", nb)
	}

	// Another shard's job is not this node's set.
	b.job(t, st, "elsewhere")
	if again := check("another shard's job created", false); again != first {
		t.Errorf("another shard's job changed the digest: %+v, was %+v", again, first)
	}

	// Every change a node would render differently changes it.
	prev := first
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"a job's command", func() error {
			_, err := st.UpdateJob(ctx, env.ID, 0, func(f store.JobFields) (store.JobFields, error) { f.Command = "env2"; return f, nil })
			return err
		}},
		{"a job's environment", func() error {
			_, err := st.UpdateJob(ctx, env.ID, 0, func(f store.JobFields) (store.JobFields, error) {
				f.Environment = map[string]string{"B": "2", "A": "1 \u00e9\"\n", "APP_ENV": "staging"}
				return f, nil
			})
			return err
		}},
		{"the tenant's linux_user", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE tenants SET linux_user = 'tweb1b' WHERE id = $1`, a.tenant)
			return err
		}},
		{"the webroot's path", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE webroots SET path = '/srv/web1/tweb1/current' WHERE id = $1`, a.webroot)
			return err
		}},
		// Written behind the store's back: neither version nor rev
		// moves, and the digest must still see it (the core's cache is
		// keyed by the values themselves).
		{"a job's command, neither version nor rev moved", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET command = 'env3' WHERE id = $1`, env.ID)
			return err
		}},
		{"a job's not_before by a microsecond", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = not_before + interval '1 microsecond' WHERE id = $1`, plain.ID)
			return err
		}},
		{"an environment value emptied", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET environment = jsonb_set(environment, '{APP_ENV}', '""') WHERE id = $1`, env.ID)
			return err
		}},
		{"the tenant's name", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE tenants SET name = name || 'x' WHERE id = $1`, a.tenant)
			return err
		}},
		{"the shard's web_storage_dir", func() error {
			_, err := st.Pool().Exec(ctx, `UPDATE shards SET web_storage_dir = web_storage_dir || '2' WHERE id = (SELECT shard_id FROM nodes WHERE id = $1)`, node)
			return err
		}},
		{"a job deleted", func() error {
			_, err := st.DeleteJob(ctx, disabled.ID, 0)
			return err
		}},
	} {
		if err := change.do(); err != nil {
			t.Fatalf("%s: %v", change.name, err)
		}
		d := check(change.name, true)
		if d.Digest == prev.Digest {
			t.Errorf("%s: digest unchanged (%s)", change.name, d.Digest)
		}
		prev = d
	}
	if prev.Jobs != 2 {
		t.Errorf("after the delete: %d jobs, want 2", prev.Jobs)
	}

	if d, ok, err := st.NodeDesiredDigest(ctx, "00000000-0000-0000-0000-000000000000"); ok || err != nil || d != (wire.DesiredDigest{}) {
		t.Errorf("unknown node: %+v, ok=%v, %v; want not ok and no error", d, ok, err)
	}
	empty := newShard(t, st, "web3", "node3")
	if d, ok, err := st.NodeDesiredDigest(ctx, empty.nodes["node3"]); !ok || err != nil || d.Jobs != 0 || d.Digest != wire.SetDigest(nil) {
		t.Errorf("empty shard: %+v, ok=%v, %v; want the empty set's digest", d, ok, err)
	}
}

// A set with a revision ahead of its snapshot has no digest, exactly as
// it has no pages: a node must not skip a read that would be refused.
func TestNodeDesiredDigestRefusesRevisionsAhead(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	j := a.job(t, st, "one")
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET rev = '900000000000'::xid8 WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.NodeDesiredPage(ctx, a.nodes["node1"], "", 10); !errors.Is(err, wire.ErrRevisionsAhead) {
		t.Fatalf("page: %v, want ErrRevisionsAhead (the premise)", err)
	}
	if d, _, err := st.NodeDesiredDigest(ctx, a.nodes["node1"]); !errors.Is(err, wire.ErrRevisionsAhead) {
		t.Errorf("digest %+v, %v; want ErrRevisionsAhead", d, err)
	}
	// Nor from the cache: a digest cached for these very values (as
	// after a logical restore behind a running core, where the rows, so
	// the key, are the same and the transaction counter younger) is
	// refused all the same.
	planted := wire.DesiredDigest{Digest: "planted", Jobs: 1}
	if err := st.PlantDigest(ctx, a.nodes["node1"], planted); err != nil {
		t.Fatal(err)
	}
	if d, _, err := st.NodeDesiredDigest(ctx, a.nodes["node1"]); !errors.Is(err, wire.ErrRevisionsAhead) {
		t.Errorf("with a digest cached for the same rows: %+v, %v; want ErrRevisionsAhead", d, err)
	}
	// The premise: with the rev seen again, the planted digest is what
	// the cache answers.
	if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET rev = pg_current_xact_id() WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := st.PlantDigest(ctx, a.nodes["node1"], planted); err != nil {
		t.Fatal(err)
	}
	if d, _, err := st.NodeDesiredDigest(ctx, a.nodes["node1"]); err != nil || d != planted {
		t.Errorf("revisions seen, digest cached: %+v, %v; want the cached %+v", d, err, planted)
	}
}

// The cache's key does not depend on how the session prints dates: in
// DateStyle Postgres a timestamptz prints its zone as an abbreviation,
// and across Moscow's change of offset on 2014-10-26 two instants an
// hour apart print alike ("Sun Oct 26 01:30:00 2014 MSK", the review's
// finding). A not_before moved from one to the other behind the store's
// back must still change the digest.
func TestNodeDesiredDigestKeyIgnoresDateStyle(t *testing.T) {
	st := pgtest.New(t)
	ctx := context.Background()
	a := newShard(t, st, "web1", "node1")
	j := a.job(t, st, "one")
	if _, err := st.Pool().Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET DateStyle = %L', current_database(), 'Postgres, MDY');
		EXECUTE format('ALTER DATABASE %I SET TimeZone = %L', current_database(), 'Europe/Moscow'); END $$`); err != nil {
		t.Fatal(err)
	}
	st.Pool().Reset() // new sessions take the database's settings
	var a1, a2 string
	if err := st.Pool().QueryRow(ctx, `SELECT '2014-10-25 21:30Z'::timestamptz::text, '2014-10-25 22:30Z'::timestamptz::text`).Scan(&a1, &a2); err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Fatalf("premise: the two instants print %q and %q in this session, want alike", a1, a2)
	}
	set := func(at string) wire.DesiredDigest {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, `UPDATE cron_jobs SET not_before = $2::timestamptz WHERE id = $1`, j.ID, at); err != nil {
			t.Fatal(err)
		}
		d, _, err := st.NodeDesiredDigest(ctx, a.nodes["node1"])
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	before := set("2014-10-25 21:30Z")
	if after := set("2014-10-25 22:30Z"); after == before {
		t.Errorf("not_before moved by an hour, digest unchanged: %+v", after)
	}
}
