// Command temporal-dev runs a real Temporal server (go.temporal.io/server,
// pinned to v1.32.1) in one process on SQLite, for `make dev` and the
// integration tests. It lives in its own module so the server's large
// dependency tree stays out of hostcron's normal build.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

func main() {
	ip := flag.String("ip", "127.0.0.1", "address to bind")
	port := flag.Int("port", 7233, "frontend gRPC port")
	dbFile := flag.String("db-file", "", "SQLite file (empty: in memory)")
	namespace := flag.String("namespace", "default", "namespace to create")
	var tlsFiles tlsFiles
	flag.StringVar(&tlsFiles.cert, "tls-cert", "", "frontend certificate (PEM); with --tls-key and --tls-ca the frontend serves mutual TLS only")
	flag.StringVar(&tlsFiles.key, "tls-key", "", "frontend private key (PEM)")
	flag.StringVar(&tlsFiles.ca, "tls-ca", "", "CA (PEM) that signs the frontend and every client certificate")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "temporal-dev")
	if err := run(*ip, *port, *dbFile, *namespace, tlsFiles, log); err != nil {
		log.Error("temporal-dev failed", "err", err)
		os.Exit(1)
	}
}

func run(ip string, port int, dbFile, namespace string, tf tlsFiles, log *slog.Logger) error {
	start := time.Now()
	cfg, err := serverConfig(ip, port, dbFile, namespace)
	if err != nil {
		return err
	}
	if err := tf.apply(cfg); err != nil {
		return err
	}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for name, svc := range map[primitives.ServiceName]string{
		primitives.FrontendService: "frontend", primitives.HistoryService: "history",
		primitives.MatchingService: "matching", primitives.WorkerService: "worker",
	} {
		hosts[name] = static.SingleLocalHost(net.JoinHostPort(ip, strconv.Itoa(cfg.Services[svc].RPC.GRPCPort)))
	}
	// The transfer queue hands every new workflow and activity task to
	// matching. Its reads (each takes every task waiting, up to 100) are
	// rate-limited per history shard: 20 a second, burst 20, sized for
	// clusters of hundreds of shards. This server has one shard, so that
	// is the whole cluster's budget, and a create costs six or seven reads
	// in 100-200 ms (a workflow task per step, the nodes' activity tasks).
	// Creates one after another drain the burst within a second, and then
	// every step waits for the next token: 40-45 ms a step, three steps of
	// a create -> active (docs/benchmarks.md, "Create -> active: one
	// history shard's read limit"). The limit only caps how often the
	// queue reads when tasks keep coming; an idle server reads no more.
	dyn := dynamicconfig.StaticClient{
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		dynamicconfig.TransferProcessorMaxPollRPS.Key():                  transferReadsPerSecond,
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(tlog.NewNoopLogger()),
		temporal.WithDynamicConfigClient(dyn),
	)
	if err != nil {
		return fmt.Errorf("build server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	log.Info("temporal ready", "address", net.JoinHostPort(ip, strconv.Itoa(port)), "namespace", namespace, "mtls", tf.enabled(),
		"startup", time.Since(start).Round(time.Millisecond).String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	log.Info("stopping")
	srv.Stop()
	return nil
}

// transferReadsPerSecond is the single history shard's transfer queue
// read limit (see run).
const transferReadsPerSecond = 1000

func serverConfig(ip string, port int, dbFile, namespace string) (*config.Config, error) {
	sql := &config.SQL{PluginName: sqliteplugin.PluginName}
	if dbFile == "" {
		sql.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		sql.DatabaseName = strconv.Itoa(rand.Intn(1 << 30))
	} else {
		sql.ConnectAttributes = map[string]string{"mode": "rwc", "_journal_mode": "WAL"}
		sql.DatabaseName = dbFile
		if _, err := os.Stat(dbFile); errors.Is(err, os.ErrNotExist) {
			if err := sqliteschema.SetupSchema(sql); err != nil {
				return nil, fmt.Errorf("set up schema: %w", err)
			}
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig("active", namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("namespace config: %w", err)
	}
	if err := sqliteschema.CreateNamespaces(sql, ns); err != nil {
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	httpPort, err := freePort(ip)
	if err != nil {
		return nil, err
	}
	var cfg config.Config
	cfg.Global.Membership.MaxJoinDuration = 30 * time.Second
	cfg.Global.Membership.BroadcastAddress = ip
	cfg.Persistence.DefaultStore = "sqlite"
	cfg.Persistence.VisibilityStore = "sqlite"
	cfg.Persistence.NumHistoryShards = 1
	cfg.Persistence.DataStores = map[string]config.DataStore{"sqlite": {SQL: sql}}
	cfg.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10, MasterClusterName: "active", CurrentClusterName: "active",
		ClusterInformation: map[string]cluster.ClusterInformation{"active": {
			Enabled: true, InitialFailoverVersion: 1, ClusterID: "hostcron-dev",
			RPCAddress:  net.JoinHostPort(ip, strconv.Itoa(port)),
			HTTPAddress: net.JoinHostPort(ip, strconv.Itoa(httpPort)),
		}},
	}
	cfg.DCRedirectionPolicy.Policy = "noop"
	cfg.Services = map[string]config.Service{}
	for _, name := range []string{"frontend", "history", "matching", "worker"} {
		var svc config.Service
		svc.RPC.BindOnIP = ip
		if name == "frontend" {
			svc.RPC.GRPCPort, svc.RPC.HTTPPort = port, httpPort
		} else if svc.RPC.GRPCPort, err = freePort(ip); err != nil {
			return nil, err
		}
		cfg.Services[name] = svc
	}
	cfg.Archival.History.State = "disabled"
	cfg.Archival.Visibility.State = "disabled"
	cfg.NamespaceDefaults.Archival.History.State = "disabled"
	cfg.NamespaceDefaults.Archival.Visibility.State = "disabled"
	cfg.PublicClient.HostPort = net.JoinHostPort(ip, strconv.Itoa(port))
	return &cfg, nil
}

func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tlsFiles are the --tls-* flags: all three or none.
type tlsFiles struct{ cert, key, ca string }

func (t tlsFiles) enabled() bool { return t.cert != "" || t.key != "" || t.ca != "" }

// apply makes the frontend serve mutual TLS: every client, the server's
// own system worker included, must present a certificate signed by the CA.
// The system worker presents the frontend's certificate, so that one must
// allow client authentication too (scripts/certs.sh issues it so).
// Internode traffic stays plain; it binds to the same address.
func (t tlsFiles) apply(cfg *config.Config) error {
	if !t.enabled() {
		return nil
	}
	if t.cert == "" || t.key == "" || t.ca == "" {
		return fmt.Errorf("--tls-cert, --tls-key and --tls-ca go together")
	}
	client := config.ClientTLS{ServerName: "localhost", RootCAFiles: []string{t.ca}}
	cfg.Global.TLS.Frontend = config.GroupTLS{
		Server: config.ServerTLS{CertFile: t.cert, KeyFile: t.key, ClientCAFiles: []string{t.ca}, RequireClientAuth: true},
		Client: client,
	}
	cfg.Global.TLS.SystemWorker = config.WorkerTLS{CertFile: t.cert, KeyFile: t.key, Client: client}
	return nil
}
