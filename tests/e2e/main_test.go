//go:build e2e

// Package e2e runs hostcron end to end: real systemd nodes booted with
// systemd-nspawn (scripts/nodes.sh), a real PostgreSQL (scripts/with-pg.sh)
// and the core API. Run it with `make test-e2e` (root required).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hostcron/hostcron/internal/api"
	"github.com/hostcron/hostcron/internal/desired"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/store"
)

// cluster is what TestMain sets up once for all tests.
type cluster struct {
	repo     string
	nodesEnv []string // NODES_DIR and SHARED for scripts/nodes.sh
	shared   string   // host path of /srv/shared
	nodes    []string
	store    *store.Store
	apiURL   string
	shardID  string
	nodeIDs  map[string]string
	tenants  map[string]store.Tenant
	webroots map[string]store.Webroot
}

var c cluster

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: needs root (systemd-nspawn); run `make test-e2e`")
		os.Exit(1)
	}
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		code = 1
	} else {
		code = m.Run()
	}
	teardown()
	os.Exit(code)
}

func setup() (int, error) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		return 1, err
	}
	c.repo = repo
	base := fmt.Sprintf("/run/hostcron-e2e-%d", os.Getpid())
	c.shared = base + "-shared"
	c.nodesEnv = []string{"NODES_DIR=" + base, "SHARED=" + c.shared}
	c.nodes = []string{"node1", "node2", "node3"}
	bin := filepath.Join(base + "-bin")
	if out, err := run(nil, "env", "CGO_ENABLED=0", "go", "build", "-o", bin+"/", "./cmd/node-agent", "./cmd/cron-run", "./cmd/cron-outcome"); err != nil {
		return 1, fmt.Errorf("build: %v\n%s", err, out)
	}
	if err := os.MkdirAll(c.shared+"/www", 0o755); err != nil {
		return 1, err
	}
	if out, err := nodesSh("up", "3"); err != nil {
		return 1, fmt.Errorf("boot nodes: %v\n%s", err, out)
	}
	if err := startAPI(); err != nil {
		return 1, err
	}
	for _, n := range c.nodes {
		if err := prepareNode(n, bin); err != nil {
			return 1, fmt.Errorf("prepare %s: %w", n, err)
		}
	}
	return 0, nil
}

func teardown() {
	if out, err := nodesSh("down"); err != nil {
		fmt.Fprintf(os.Stderr, "nodes down: %v\n%s", err, out)
	}
	os.RemoveAll(c.shared)
	os.RemoveAll(strings.TrimPrefix(c.nodesEnv[0], "NODES_DIR=") + "-bin")
	if c.store != nil {
		c.store.Close()
	}
}

// startAPI serves the core API on a fresh database, on 127.0.0.1, which
// the nodes share.
func startAPI() error {
	ctx := context.Background()
	dsn := os.Getenv("HOSTCRON_TEST_DATABASE_URL")
	if dsn == "" {
		return fmt.Errorf("HOSTCRON_TEST_DATABASE_URL not set; run under scripts/with-pg.sh")
	}
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("hc_e2e_%d", os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	u, _ := url.Parse(dsn)
	u.Path = "/" + name
	if c.store, err = store.Open(ctx, u.String(), 20); err != nil {
		return err
	}
	if err := c.store.Migrate(ctx); err != nil {
		return err
	}
	e, _ := api.New(c.store, api.Config{AdminKey: "e2e-admin", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, e)
	c.apiURL = "http://" + ln.Addr().String()
	sh, err := c.store.CreateShard(ctx, "web-e2e", "/srv/shared/www")
	if err != nil {
		return err
	}
	c.shardID = sh.ID
	c.tenants, c.webroots, c.nodeIDs = map[string]store.Tenant{}, map[string]store.Webroot{}, map[string]string{}
	for _, t := range []string{"acme", "globex"} {
		tn, err := c.store.CreateTenant(ctx, store.Tenant{Name: t, ShardID: sh.ID, LinuxUser: t, LinuxGroup: t})
		if err != nil {
			return err
		}
		wr, err := c.store.CreateWebroot(ctx, tn.ID, "/srv/shared/www/"+t+"/public")
		if err != nil {
			return err
		}
		c.tenants[t], c.webroots[t] = tn, wr
	}
	return nil
}

// prepareNode installs the binaries, creates the tenants' users with the
// same ids on every node, writes the node config and starts the agent.
func prepareNode(n, bin string) error {
	root, err := nodesSh("root", n)
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	for _, b := range []string{"node-agent", "cron-run", "cron-outcome"} {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "usr/local/bin", b), data, 0o755); err != nil {
			return err
		}
	}
	for i, t := range []string{"acme", "globex"} {
		id := fmt.Sprint(2001 + i)
		if out, err := nodeExec(n, nil, "sh", "-c", "getent passwd "+t+" >/dev/null || { groupadd -g "+id+" "+t+" && useradd -u "+id+" -g "+id+" -M -d /srv/shared/www/"+t+" -s /bin/sh "+t+"; }"); err != nil {
			return fmt.Errorf("users: %v %s", err, out)
		}
		if err := os.MkdirAll(filepath.Join(c.shared, "www", t, "public"), 0o755); err != nil {
			return err
		}
		for _, p := range []string{"www/" + t, "www/" + t + "/public"} {
			if err := os.Chown(filepath.Join(c.shared, p), 2001+i, 2001+i); err != nil {
				return err
			}
		}
	}
	node, token, err := c.store.CreateNode(context.Background(), c.shardID, n)
	if err != nil {
		return err
	}
	c.nodeIDs[n] = node.ID
	cfg, _ := json.Marshal(nodeconf.Config{APIURL: c.apiURL, Credential: token, NodeName: n, NodeID: node.ID})
	if err := os.MkdirAll(filepath.Join(root, "etc/hostcron"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostcron/node.json"), cfg, 0o600); err != nil {
		return err
	}
	if out, err := nodeExec(n, nil, "systemd-run", "--unit=hostcron-node-agent", "--property=Restart=always",
		"/usr/local/bin/node-agent", "run", "--redeliver-every=2s"); err != nil {
		return fmt.Errorf("start agent: %v %s", err, out)
	}
	return nil
}

func run(stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.repo
	cmd.Env = append(os.Environ(), c.nodesEnv...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func nodesSh(args ...string) (string, error) {
	return run(nil, filepath.Join(c.repo, "scripts/nodes.sh"), args...)
}

// nodeExec runs a command inside a node.
func nodeExec(node string, stdin []byte, args ...string) (string, error) {
	return run(stdin, filepath.Join(c.repo, "scripts/nodes.sh"), append([]string{"exec", node}, args...)...)
}

// agent runs a node-agent subcommand on a node with jobs on stdin and
// decodes its JSON answer into out.
func agent(t *testing.T, node string, jobs []desired.Job, out any, args ...string) {
	t.Helper()
	var stdin []byte
	if jobs != nil {
		stdin, _ = json.Marshal(jobs)
	}
	stdout, err := nodeExec(node, stdin, append([]string{"/usr/local/bin/node-agent"}, args...)...)
	if err != nil {
		t.Fatalf("%s: node-agent %v: %v\n%s", node, args, err, stdout)
	}
	// slog lines go to stderr, merged here; the JSON answer starts at '{' or '['.
	i := strings.IndexAny(stdout, "{[")
	if out != nil && i >= 0 {
		if err := json.Unmarshal([]byte(stdout[i:]), out); err != nil {
			t.Fatalf("%s: decode node-agent output: %v\n%s", node, err, stdout)
		}
	}
}

// newJob stores a job in the core (bypassing API validation, so tests may
// use a seconds field) and returns it as the nodes must have it.
func newJob(t *testing.T, tenant, schedule, command string, timeout, memMB, maxFailures int) desired.Job {
	t.Helper()
	j, err := c.store.CreateJob(context.Background(), c.tenants[tenant].ID, store.JobSpec{
		WebrootID: c.webroots[tenant].ID, Schedule: schedule, Timezone: "UTC", Command: command,
		Enabled: true, TimeoutSeconds: timeout, MaxMemoryMB: memMB, MaxFailures: maxFailures,
	})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := c.store.DesiredJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitRuns polls the run history of a job until cond holds or time is up.
func waitRuns(t *testing.T, jobID string, timeout time.Duration, cond func([]store.Run) bool) []store.Run {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		runs, err := c.store.ListRuns(context.Background(), jobID, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if cond(runs) {
			return runs
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: condition not met after %v; runs: %+v", jobID, timeout, runs)
		}
		time.Sleep(time.Second)
	}
}
