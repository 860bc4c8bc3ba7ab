//go:build e2e

// Package harness runs hostcron for the end-to-end tiers: real systemd
// nodes booted with systemd-nspawn (scripts/nodes.sh) on shared storage, a
// real PostgreSQL (scripts/with-pg.sh, a database from pgtest), the core
// in process, started by internal/core as core-api starts it, and,
// optionally, the embedded Temporal server. Node agents run inside the
// nodes as systemd services, installed by scripts/node-install.sh as
// `make dev` installs them.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/hostcron/hostcron/internal/core"
	"github.com/hostcron/hostcron/internal/housekeeping"
	"github.com/hostcron/hostcron/internal/loglevel"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/wire"
)

// AdminKey is the bootstrap admin key of the harness's API.
const AdminKey = "e2e-admin-key-0123456789abcdef0123"

// tenants are the shard's tenants with their Linux uid (and gid), the same
// on every node.
var tenants = []struct {
	name string
	uid  int
}{{"acme", 2001}, {"globex", 2002}}

// sharedWWW is the shard's web storage dir as the nodes mount it.
const sharedWWW = "/srv/shared/www"

// Options choose what runs.
type Options struct {
	Nodes    int  // nodes booted at start
	Temporal bool // embedded Temporal, core worker, dispatcher, node workers
	Loki     bool // a real Loki (scripts/loki.sh), node agents ship to it
	// Housekeeping runs the core's lost-run sweeper with this grace (0: off).
	OutcomeGrace time.Duration
	NodeTimeout  time.Duration // provisioning's per-node bound (Temporal only)
	// DenyControlPlane puts Temporal and Loki on an address of their own
	// that every node denies tenants (deny_addresses, and the operator's
	// firewall where IPAddressDeny= is not enforced): controlplane.go.
	DenyControlPlane bool
	// Outages: a PostgreSQL cluster of the tier's own and Temporal state in
	// a file, so StopPostgres/StartPostgres and StopTemporal/StartTemporal
	// disturb no other tier (outages.go).
	PrivatePostgres, RestartableTemporal bool
	// Mail is the SMTP relay notification e-mail goes through (empty
	// Addr: none).
	Mail core.SMTPConfig
	// DesiredPageSize is the nodes' desired-set page size (0: 7, so every
	// converge of a test's tens of jobs reads several pages; benchmarks
	// at scale set the production default).
	DesiredPageSize int
}

// Cluster is a running hostcron.
type Cluster struct {
	Repo     string
	Shared   string // host path of /srv/shared
	Nodes    []string
	Store    *store.Store // the tests' own connection; it outlives StopAPI
	APIURL   string
	ShardID  string
	NodeIDs  map[string]string
	Tenants  map[string]store.Tenant
	Webroots map[string]store.Webroot
	Temporal client.Client // the tests' own client (nil without Temporal)
	LokiURL  string

	opts     Options
	env      []string // NODES_DIR, SHARED and TENANTS for the scripts
	base     string
	bin      string
	db       *pgtest.DB
	temporal *exec.Cmd
	loki     *exec.Cmd
	// temporalAddr is the embedded server's frontend ("" without Temporal).
	temporalAddr string
	// trustDir holds the CA, certificates and payload keys of
	// scripts/certs.sh and scripts/keys.sh: with Temporal, every
	// connection is mutual TLS and every payload sealed and signed, as in
	// production ("" without Temporal).
	trustDir string
	core     *core.Core // nil while the API is stopped
	apiAddr  string
	// controlPlane is Temporal's and Loki's address with
	// Options.DenyControlPlane; firewalled the node whose iptables
	// installed the operator's rule (controlplane.go).
	controlPlane, firewalled string
	pgDir                    string // the private PostgreSQL cluster ("" without one)
	pgPort                   int
	tport                    int      // the embedded Temporal's frontend port
	claim                    *os.File // holds base's flock: this run is alive (reap.go)
	stopOnce                 sync.Once
}

// Start brings everything up; on error it tears down what it started.
func Start(opts Options) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the end-to-end tier needs root (systemd-nspawn); run `make test-e2e`")
	}
	repo, err := repoRoot()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Repo: repo, opts: opts, NodeIDs: map[string]string{},
		Tenants: map[string]store.Tenant{}, Webroots: map[string]store.Webroot{}}
	c.base = fmt.Sprintf("/run/hostcron-e2e-%d", os.Getpid())
	c.Shared, c.bin = c.base+"-shared", c.base+"-bin"
	var users []string
	for _, t := range tenants {
		users = append(users, fmt.Sprintf("%s:%d", t.name, t.uid))
	}
	c.env = []string{"NODES_DIR=" + c.base, "SHARED=" + c.Shared, "TENANTS=" + strings.Join(users, " ")}
	// What runs killed outright left is reaped, and this run's base is
	// held from here on (reap.go).
	if c.claim, err = claimRun(repo, c.base); err != nil {
		return nil, err
	}
	track(c)
	if err := c.start(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start() error {
	ctx := context.Background()
	// The nodes get hostcron the way web nodes do: the Debian package.
	if out, err := c.run(nil, "make", "packages", "BIN="+c.bin, "DIST="+c.bin+"/dist"); err != nil {
		return fmt.Errorf("make packages: %v\n%s", err, out)
	}
	if err := os.MkdirAll(c.Shared+"/www", 0o755); err != nil {
		return err
	}
	if err := c.startStore(ctx); err != nil {
		return err
	}
	if c.opts.DenyControlPlane {
		if err := c.setupControlPlane(); err != nil {
			return err
		}
	}
	if c.opts.Temporal {
		if err := c.startTemporal(); err != nil {
			return err
		}
	}
	if c.opts.Loki {
		if err := c.startLoki(); err != nil {
			return err
		}
	}
	if err := c.startAPI(); err != nil {
		return err
	}
	var names []string
	for i := 1; i <= c.opts.Nodes; i++ {
		names = append(names, fmt.Sprintf("node%d", i))
	}
	return c.AddNodes(names...)
}

// Stop tears everything down: nodes, mounts, cgroups, processes. It runs
// once, whether the tier, a signal or the timeout calls it first.
func (c *Cluster) Stop() {
	c.stopOnce.Do(c.stop)
	untrack(c)
}

func (c *Cluster) stop() {
	c.unfirewallControlPlane()
	// KEEP_NODES: the base directory goes last, with the claim on it
	// (below); gone earlier, a reaper would take this run for dead while
	// it still stops its servers.
	if out, err := c.runEnv([]string{"KEEP_NODES=1"}, nil, filepath.Join(c.Repo, "scripts/nodes.sh"), "down"); err != nil {
		fmt.Fprintf(os.Stderr, "nodes down: %v\n%s", err, out)
	}
	c.StopAPI()
	if c.Temporal != nil {
		c.Temporal.Close()
	}
	for _, p := range []*exec.Cmd{c.temporal, c.loki} {
		if p != nil && p.Process != nil {
			_ = p.Process.Signal(os.Interrupt)
			_ = p.Wait()
		}
	}
	if c.db != nil {
		c.db.Drop()
	}
	c.removeControlPlane()
	c.stopPrivatePostgres()
	os.RemoveAll(c.base + "-temporal")
	os.RemoveAll(c.Shared)
	os.RemoveAll(c.bin)
	os.RemoveAll(c.base + "-loki")
	os.RemoveAll(c.base + "-trust")
	os.RemoveAll(c.base)
	if c.claim != nil {
		c.claim.Close() // last: held, the run is alive to a reaper
	}
}

// startStore makes the cluster's database, the way unit tests get theirs,
// and registers the shard, its tenants and their webroots, whose
// directories on the shared storage belong to the tenants.
func (c *Cluster) startStore(ctx context.Context) error {
	var err error
	if c.db, err = c.createDB(ctx); err != nil {
		return err
	}
	c.Store = c.db.Store
	sh, err := c.Store.CreateShard(ctx, "web-e2e", sharedWWW)
	if err != nil {
		return err
	}
	c.ShardID = sh.ID
	for _, t := range tenants {
		tn, err := c.Store.CreateTenant(ctx, store.Tenant{Name: t.name, ShardID: sh.ID, LinuxUser: t.name, LinuxGroup: t.name})
		if err != nil {
			return err
		}
		wr, err := c.Store.CreateWebroot(ctx, tn.ID, "/srv/shared/www/"+t.name+"/public")
		if err != nil {
			return err
		}
		c.Tenants[t.name], c.Webroots[t.name] = tn, wr
		if err := os.MkdirAll(filepath.Join(c.Shared, "www", t.name, "public"), 0o755); err != nil {
			return err
		}
		for _, p := range []string{"www/" + t.name, "www/" + t.name + "/public"} {
			if err := os.Chown(filepath.Join(c.Shared, p), t.uid, t.uid); err != nil {
				return err
			}
		}
	}
	return nil
}

// startTemporal builds (cached) and runs the embedded Temporal server from
// its own module; the core connects to it when it starts.
func (c *Cluster) startTemporal() error {
	tbin := filepath.Join(c.bin, "temporal-dev")
	build := exec.Command("go", "build", "-o", tbin, ".")
	build.Dir = filepath.Join(c.Repo, "devtools/temporal")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build temporal-dev: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	if err := c.makeTrust(); err != nil {
		return err
	}
	c.tport = port
	if err := c.launchTemporal(); err != nil {
		return err
	}
	c.temporalAddr = net.JoinHostPort(c.listenIP(), fmt.Sprint(port))
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := client.Options{HostPort: c.temporalAddr, Logger: tlog.NewStructuredLogger(quiet)}
	if err := c.coreTrust().ApplyCore(&opts); err != nil {
		return err
	}
	c.Temporal, err = client.Dial(opts)
	return err
}

// trustNodes are the node names the harness makes keys for: every test
// tier boots at most these.
var trustNodes = []string{"node1", "node2", "node3", "node4", "node5", "node6"}

// makeTrust generates the CA, certificates and payload keys.
func (c *Cluster) makeTrust() error {
	c.trustDir = c.base + "-trust"
	for _, script := range []string{"scripts/certs.sh", "scripts/keys.sh"} {
		if out, err := c.runEnv(c.certEnv(), nil, filepath.Join(c.Repo, script), append([]string{c.trustDir}, trustNodes...)...); err != nil {
			return fmt.Errorf("%s: %v\n%s", script, err, out)
		}
	}
	return nil
}

// coreTrust is the core's trust material (empty without Temporal).
func (c *Cluster) coreTrust() trust.Files {
	if c.trustDir == "" {
		return trust.Files{}
	}
	d := c.trustDir
	return trust.Files{TLSCert: d + "/core.crt", TLSKey: d + "/core.key", TLSCA: d + "/ca.crt",
		PayloadKeys: []string{d + "/payload.aes"}, SigningKey: d + "/core-sign.key",
		TrustedKeys: []string{d + "/node-*-sign.pub"}}
}

// nodeTrust copies node n's trust material into its root filesystem and
// returns the paths its config names (empty without Temporal).
func (c *Cluster) nodeTrust(n string) (nodeconf.TrustFiles, error) {
	if c.trustDir == "" {
		return nodeconf.TrustFiles{}, nil
	}
	const dir = "/etc/hostcron/trust/"
	files := map[string]string{
		"ca.crt": "ca.crt", "node.crt": "node-" + n + ".crt", "node.key": "node-" + n + ".key",
		"payload.aes": "payload.aes", "node-sign.key": "node-" + n + "-sign.key", "core-sign.pub": "core-sign.pub",
	}
	if err := os.MkdirAll(filepath.Join(c.Root(n), dir), 0o700); err != nil {
		return nodeconf.TrustFiles{}, err
	}
	for dst, src := range files {
		b, err := os.ReadFile(filepath.Join(c.trustDir, src))
		if err != nil {
			return nodeconf.TrustFiles{}, err
		}
		if err := os.WriteFile(filepath.Join(c.Root(n), dir, dst), b, 0o600); err != nil {
			return nodeconf.TrustFiles{}, err
		}
	}
	return nodeconf.TrustFiles{TLSCert: dir + "node.crt", TLSKey: dir + "node.key", TLSCA: dir + "ca.crt",
		PayloadKeys: []string{dir + "payload.aes"}, SigningKey: dir + "node-sign.key",
		TrustedKeys: []string{dir + "core-sign.pub"}}, nil
}

// startLoki runs a real Loki built from devtools/loki (cached).
func (c *Cluster) startLoki() error {
	if out, err := c.run(nil, filepath.Join(c.Repo, "scripts/loki.sh"), "build"); err != nil {
		return fmt.Errorf("build loki: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.loki = exec.Command(filepath.Join(c.Repo, "scripts/loki.sh"), "run", c.base+"-loki", fmt.Sprint(port), c.listenIP())
	if err := os.MkdirAll(c.base+"-loki", 0o755); err != nil {
		return err
	}
	logf, err := os.Create(c.base + "-loki/loki.log")
	if err != nil {
		return err
	}
	c.loki.Stdout, c.loki.Stderr = logf, logf
	if err := c.loki.Start(); err != nil {
		return err
	}
	c.LokiURL = "http://" + net.JoinHostPort(c.listenIP(), fmt.Sprint(port))
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(c.LokiURL + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loki not ready after 90s")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// StopAPI stops the core (API, worker, outbox dispatcher, sweeper), as a
// crash or a deploy would; StartAPI brings it back on the same address.
func (c *Cluster) StopAPI() {
	if c.core == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.core.Stop(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "stop core: %v\n", err)
	}
	c.core = nil
}

// StartAPI restarts a stopped core.
func (c *Cluster) StartAPI() error { return c.startAPI() }

// startAPI starts the core as core-api serve does, on 127.0.0.1, which
// the nodes share. It converges no shard periodically: the tiers decide
// when a converge runs (a node's announce).
func (c *Cluster) startAPI() error {
	addr := c.apiAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cfg := core.Config{
		DatabaseURL: c.db.DSN, MaxConns: 20, Listen: addr, AdminKey: AdminKey,
		Log:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		TemporalAddress: c.temporalAddr, NodeTimeout: c.opts.NodeTimeout, LokiURL: c.LokiURL,
		Trust: c.coreTrust(),
		// Test receivers listen on 127.0.0.1; production refuses that.
		Notify: core.NotifyConfig{AllowPrivateTargets: true, Interval: 200 * time.Millisecond, SMTP: c.opts.Mail},
	}
	if c.opts.OutcomeGrace > 0 {
		cfg.Housekeeping = &housekeeping.Config{Interval: 5 * time.Second, Grace: c.opts.OutcomeGrace}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := core.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("start core: %w", err)
	}
	c.core, c.apiAddr = k, k.Addr()
	c.APIURL = "http://" + c.apiAddr
	return nil
}

// AddNodes boots nodes, registers them in the shard and starts their
// agents. Names must be node1, node2, ... in order of their numbers.
func (c *Cluster) AddNodes(names ...string) error {
	if len(names) == 0 {
		return nil
	}
	first := strings.TrimPrefix(names[0], "node")
	if out, err := c.NodesSh("up", fmt.Sprint(len(names)), first); err != nil {
		return fmt.Errorf("boot nodes: %v\n%s", err, out)
	}
	for _, n := range names {
		if err := c.prepareNode(n); err != nil {
			return fmt.Errorf("prepare %s: %w", n, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	return nil
}

// StopNode halts a node, keeping its disk; StartNode boots it again.
func (c *Cluster) StopNode(n string) error {
	_, err := c.NodesSh("down", n)
	return err
}

// KillNode kills a node at once, as a power loss would: nothing in it gets
// to run, no unit stops cleanly.
func (c *Cluster) KillNode(n string) error {
	out, err := c.NodesSh("kill", n)
	if err != nil {
		return fmt.Errorf("kill %s: %v\n%s", n, err, out)
	}
	return nil
}

// StartNode boots a stopped node; its agent starts with it.
func (c *Cluster) StartNode(n string) error {
	out, err := c.NodesSh("up", "1", strings.TrimPrefix(n, "node"))
	if err != nil {
		return fmt.Errorf("boot %s: %v\n%s", n, err, out)
	}
	return nil
}

// agentDropIn makes the packaged agent service quicker for tests, and
// passes on the tests' own HOSTCRON_LOG_LEVEL (debug shows every apply's
// phases in the node's journal).
func agentDropIn() string {
	s := `[Service]
ExecStart=
ExecStart=/usr/local/bin/node-agent run --config /etc/hostcron/node.json --redeliver-every=2s
RestartSec=1
`
	if v := os.Getenv(loglevel.Env); v != "" {
		s += "Environment=" + loglevel.Env + "=" + v + "\n"
	}
	return s
}

// prepareNode registers the node in the shard and installs it with
// scripts/node-install.sh: the node-agent package by dpkg, the tenants'
// users, the node config and agentDropIn; the agent starts.
func (c *Cluster) prepareNode(n string) error {
	debs, _ := filepath.Glob(filepath.Join(c.bin, "dist", "hostcron-node-agent_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("want one node-agent package in %s/dist, found %v", c.bin, debs)
	}
	node, token, err := c.Store.CreateNode(context.Background(), c.ShardID, n)
	if err != nil {
		return err
	}
	c.NodeIDs[n] = node.ID
	cfg := nodeconf.Config{APIURL: c.APIURL, Credential: token, NodeName: n, NodeID: node.ID, WebStorageDir: sharedWWW}
	// Small pages, so every converge of a booted node reads its set in
	// several of them (a test's tens of jobs fit one default page).
	cfg.DesiredPageSize = 7
	if c.opts.DesiredPageSize > 0 {
		cfg.DesiredPageSize = c.opts.DesiredPageSize
	}
	cfg.TemporalAddress, cfg.LokiURL, cfg.DenyAddresses = c.temporalAddr, c.LokiURL, c.denyAddresses()
	if cfg.Trust, err = c.nodeTrust(n); err != nil {
		return fmt.Errorf("trust files for %s: %w", n, err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	conf, dropIn := filepath.Join(c.bin, n+".json"), filepath.Join(c.bin, "agent-e2e.conf")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(dropIn, []byte(agentDropIn()), 0o644); err != nil {
		return err
	}
	if out, err := c.run(nil, filepath.Join(c.Repo, "scripts/node-install.sh"), n, debs[0], conf, dropIn); err != nil {
		return fmt.Errorf("node-install.sh: %v\n%s", err, out)
	}
	return c.firewallControlPlane(n)
}

// Root is the host path of a node's root filesystem.
func (c *Cluster) Root(n string) string { return filepath.Join(c.base, n, "root") }

func (c *Cluster) run(stdin []byte, name string, args ...string) (string, error) {
	return c.runEnv(nil, stdin, name, args...)
}

// runEnv is run with env added.
func (c *Cluster) runEnv(env []string, stdin []byte, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = c.Repo
	cmd.Env = append(append(os.Environ(), c.env...), env...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// NodesSh runs scripts/nodes.sh for this cluster.
func (c *Cluster) NodesSh(args ...string) (string, error) {
	return c.run(nil, filepath.Join(c.Repo, "scripts/nodes.sh"), args...)
}

// Exec runs a command inside a node.
func (c *Cluster) Exec(node string, stdin []byte, args ...string) (string, error) {
	return c.run(stdin, filepath.Join(c.Repo, "scripts/nodes.sh"), append([]string{"exec", node}, args...)...)
}

// Agent runs a node-agent subcommand on a node with jobs on stdin and
// decodes its JSON answer into out.
func (c *Cluster) Agent(t testing.TB, node string, jobs []wire.Job, out any, args ...string) {
	t.Helper()
	var stdin []byte
	if jobs != nil {
		stdin, _ = json.Marshal(jobs)
	}
	stdout, err := c.Exec(node, stdin, append([]string{"/usr/local/bin/node-agent"}, args...)...)
	if err != nil {
		t.Fatalf("%s: node-agent %v: %v\n%s", node, args, err, stdout)
	}
	// slog lines (JSON objects) go to stderr, merged here before the
	// answer: the answer is the last JSON value.
	i := strings.IndexAny(stdout, "{[")
	if out != nil && i >= 0 {
		var last json.RawMessage
		dec := json.NewDecoder(strings.NewReader(stdout[i:]))
		for {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				break
			}
			last = v
		}
		if err := json.Unmarshal(last, out); err != nil {
			t.Fatalf("%s: decode node-agent output: %v\n%s", node, err, stdout)
		}
	}
}

// State returns a node's cron units by name (node-agent state).
func (c *Cluster) State(t testing.TB, node string) map[string]wire.UnitState {
	t.Helper()
	var st []wire.UnitState
	c.Agent(t, node, nil, &st, "state")
	out := map[string]wire.UnitState{}
	for _, s := range st {
		out[s.Name] = s
	}
	return out
}

// NewJob stores a job in the core (bypassing API validation, so tests may
// use a seconds field) and returns it as the nodes must have it.
func (c *Cluster) NewJob(t testing.TB, tenant, schedule, command string, timeout, memMB, maxFailures int) wire.Job {
	t.Helper()
	return c.NewJobWithEnv(t, tenant, schedule, command, nil, timeout, memMB, maxFailures)
}

// NewJobWithEnv is NewJob with an environment for the command, stored as
// the API stores it, so the desired job carries it from the database.
func (c *Cluster) NewJobWithEnv(t testing.TB, tenant, schedule, command string, env map[string]string, timeout, memMB, maxFailures int) wire.Job {
	t.Helper()
	j, _, err := c.Store.CreateJob(context.Background(), c.Tenants[tenant].ID, store.JobFields{
		WebrootID: c.Webroots[tenant].ID, Schedule: schedule, Timezone: "UTC", Command: command,
		Enabled: true, TimeoutSeconds: timeout, MaxMemoryMB: memMB, MaxFailures: maxFailures, Environment: env,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := c.Store.DesiredJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// WaitRuns polls the run history of a job until cond holds or time is up.
func (c *Cluster) WaitRuns(t testing.TB, jobID string, timeout time.Duration, cond func([]store.Run) bool) []store.Run {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		runs, err := c.Store.ListRuns(context.Background(), jobID, 1000)
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RunTests is a tier's TestMain: it starts a cluster with opts, hands it to
// use (the tier keeps it in its package), runs the tests, stops the cluster
// and returns the exit code.
func RunTests(m *testing.M, tier string, opts Options, use func(*Cluster)) int {
	c, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, tier+" setup:", err)
		return 1
	}
	defer c.Stop()
	use(c)
	TearDownBeforeTimeout(tier)
	return m.Run()
}
