package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/hostcron/hostcron/internal/clockoffset"
	"github.com/hostcron/hostcron/internal/desiredset"
	"github.com/hostcron/hostcron/internal/logship"
	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/trust"
	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/workflows"
)

// The unit manager is what the workflows' node activities need.
var _ workflows.NodeUnits = (*unitmgr.Manager)(nil)

// runCmd is the agent's daemon until SIGTERM: a Temporal worker on the
// node's task queue applying the core's changes to the node's units, the
// redelivery of spooled outcomes, and the shipping of cron logs to Loki.
func runCmd(configPath *string, log *slog.Logger) *cobra.Command {
	var every, minOrphanAge time.Duration // minOrphanAge: deprecated, ignored
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := nodeconf.Load(*configPath)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			setMemoryLimit(log) // the daemon's only: a CLI command is short-lived
			reg, nm := nodeMetrics(cfg, log)
			if cfg.MetricsAddr != nodeconf.MetricsOff {
				// A taken port costs the metrics, not the node's cron jobs.
				if srv, err := metrics.Listen(cfg.MetricsAddr, reg, log); err != nil {
					log.Error("no metrics", "err", err)
				} else {
					defer closeMetrics(srv, log)
				}
			}
			if cfg.TemporalAddress != "" {
				stopWorker, err := startNodeWorker(ctx, cfg, nm, log)
				if err != nil {
					return err
				}
				defer stopWorker()
				go announce(ctx, cfg, log)
			}
			go clockLoop(ctx, cfg, time.Minute, log)
			if cfg.LokiURL != "" {
				go logship.Run(ctx, logship.Config{
					Loki: &logship.Client{URL: cfg.LokiURL, OrgID: cfg.LokiOrgID, BearerToken: cfg.LokiToken,
						Username: cfg.LokiUsername, Password: cfg.LokiPassword}, Node: cfg.NodeName,
					CursorFile: filepath.Join(cfg.StateDir, "journal.cursor"), Log: log.With("component", "logship"),
					Shipped: nm.Shipped,
				})
			}
			log.Info("node agent started", "node", cfg.NodeName)
			redeliverLoop(ctx, cfg, every, log)
			log.Info("node agent stopped")
			return nil
		},
	}
	cmd.Flags().DurationVar(&every, "redeliver-every", 5*time.Second, "how often to retry spooled outcomes")
	// Orphans are decided by the core's snapshot, not by file age; the
	// flag stays for a release so existing unit files still start.
	cmd.Flags().DurationVar(&minOrphanAge, "min-orphan-age", 0, "deprecated, ignored: orphans are decided by the converge's snapshot")
	_ = cmd.Flags().MarkDeprecated("min-orphan-age", "orphans are decided by the converge's snapshot, not by file age")
	return cmd
}

// redeliverLoop drains the outcome spool until ctx ends; each report keeps
// its own backoff, so a pass only posts the ones that are due.
func redeliverLoop(ctx context.Context, cfg nodeconf.Config, every time.Duration, log *slog.Logger) {
	client := outcome.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential, HTTP: &http.Client{Timeout: 10 * time.Second}}
	t := time.NewTicker(every)
	defer t.Stop()
	deadTotal := 0 // dead-lettered since start; the dead/ directory keeps them all
	for {
		st, err := outcome.Redeliver(ctx, client, cfg.SpoolDir, time.Now())
		deadTotal += st.DeadLettered
		if st.Delivered > 0 || st.DeadLettered > 0 {
			log.Info("redelivered spooled outcomes", "delivered", st.Delivered, "dead_lettered", st.DeadLettered,
				"dead_lettered_total", deadTotal, "retrying", st.Retrying, "waiting", st.Waiting)
		}
		if st.TempsRemoved > 0 {
			log.Info("removed temporary files killed writers left in the outcome spool", "removed", st.TempsRemoved,
				"older_than", outcome.TempMaxAge.String())
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("outcomes stay spooled", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startNodeWorker connects to Temporal and serves this node's task queue.
func startNodeWorker(ctx context.Context, cfg nodeconf.Config, nm *metrics.Node, log *slog.Logger) (func(), error) {
	if cfg.NodeID == "" {
		return nil, fmt.Errorf("node config: node_id is required to serve the node's task queue")
	}
	admission := trust.NodePolicy(cfg.WebStorageDir)
	if err := admission.Validate(); err != nil {
		return nil, fmt.Errorf("node config web_storage_dir: %w", err)
	}
	var secure func(*client.Options) error
	files := trust.Files(cfg.Trust)
	if files.Enabled() {
		secure = files.ApplyNode
	} else {
		log.Warn("Temporal without TLS and payload signing: any client of the frontend can drive this node; only for development")
	}
	// The desired-set pages a converge reads from the core API are
	// accepted only signed by the core, as payloads are (neither is
	// checked without trust material).
	pages, err := files.NodePages()
	if err != nil {
		return nil, fmt.Errorf("desired-set page verification: %w", err)
	}
	tc, err := workflows.Dial(ctx, cfg.TemporalAddress, cfg.TemporalNamespace, secure, log)
	if err != nil {
		return nil, err
	}
	m, closeConn, err := openManager(ctx, cfg, log)
	if err != nil {
		tc.Close()
		return nil, err
	}
	m.SetObserver(nm)
	m.SetLockPatience(daemonLockPatience)
	// What admission decides by besides the accounts (which the fast
	// path's fingerprint reads): another storage dir converges in full.
	m.SetFastPathKey("admission web_storage_dir=" + cfg.WebStorageDir)
	warnControlPlane(ctx, cfg, log)
	go startsLoop(ctx, cfg, m, log.With("component", "starts"))
	w := worker.New(tc, workflows.NodeTaskQueue(cfg.NodeID), worker.Options{MaxConcurrentActivityExecutionSize: activitySlots})
	// A converge hands this node a reference; it reads its desired set
	// from the core API in pages, as this node (its credential).
	desiredSets := desiredset.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential,
		HTTP: &http.Client{Timeout: 30 * time.Second}, PageSize: cfg.DesiredPageSize,
		Pages: pages, Log: log.With("component", "desired-set")}
	workflows.RegisterNode(w, &workflows.NodeActivities{Units: m, Admission: admission, Desired: desiredSets, Completer: tc,
		AfterConverge: releaseMemory})
	if err := w.Start(); err != nil {
		closeConn()
		tc.Close()
		return nil, fmt.Errorf("start node worker: %w", err)
	}
	return func() { w.Stop(); closeConn(); tc.Close() }, nil
}

// activitySlots is how many activities the agent runs at once. Job
// changes (ApplyJobs, RemoveUnits) hold none while they wait: they are
// queued in the unit manager's apply queue, which merges those that wait
// while an apply runs into one plan and one daemon-reload (issue 16), and
// completed asynchronously when it answers (workflows.completeLater). So
// batches are bounded by what arrives during an apply, not by the slots
// (with 128 slots held by waiting changes, 1,000 changes took 14-16
// reloads; all in flight, 2, docs/benchmarks.md, "Apply queue: changes
// completed asynchronously"), and a waiting change costs no activity
// goroutine (some 32 KB of stack each: 1,024 waiting took an agent from
// 30 to 69 MB). The slots serve the rest: converges, run-nows (which wait
// up to their TTL), cancels and state reads.
const activitySlots = 128

// announce tells the core this node is up, so it converges the node; it
// retries until the core answers.
func announce(ctx context.Context, cfg nodeconf.Config, log *slog.Logger) {
	hc := &http.Client{Timeout: 10 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cfg.APIURL+"/internal/v1/nodes/announce", nil)
		req.Header.Set("Authorization", "Bearer "+cfg.Credential)
		sent := time.Now()
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			recordClockOffset(cfg, "announce", sent, time.Now(), resp.Header.Get("Date"), log)
			if resp.StatusCode == http.StatusAccepted {
				log.Info("announced to the core; converge started")
				return
			}
			err = fmt.Errorf("core answered %s", resp.Status)
		}
		log.Warn("announce failed, retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
	}
}

// clockLoop measures this node's clock against the core API's every
// interval, so the runner has a fresh reading (runner.ClockFresh) when it
// must tell a corrupt stamp from a correct one its slow clock reads as
// future. Any answer carries a Date header; /healthz is the cheapest.
func clockLoop(ctx context.Context, cfg nodeconf.Config, every time.Duration, log *slog.Logger) {
	hc := &http.Client{Timeout: 10 * time.Second}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.APIURL+"/healthz", nil)
		sent := time.Now()
		if resp, err := hc.Do(req); err != nil {
			log.Debug("clock offset not measured: core API unreachable", "err", err)
		} else {
			resp.Body.Close()
			recordClockOffset(cfg, "healthz", sent, time.Now(), resp.Header.Get("Date"), log)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordClockOffset measures this node's clock against the core API's Date
// header and keeps the reading for `node-agent state` and, in /run, for
// the runner.
func recordClockOffset(cfg nodeconf.Config, source string, sent, received time.Time, date string, log *slog.Logger) {
	off, err := clockoffset.Measure(sent, received, date)
	if err != nil {
		log.Warn("clock offset not measured", "err", err)
		return
	}
	r := clockoffset.Reading{OffsetSeconds: off.Seconds(), MeasuredAt: received.UTC(), Source: source}
	// CLOCK_BOOTTIME read right after received, on the same moment: the
	// runner ages the reading by it and sees a step of the wall clock since.
	if boot, err := clockoffset.CurrentBoot(); err != nil {
		log.Warn("clock offset saved without boot time: the runner will not trust it to verify the clock", "err", err)
	} else {
		r.BootID, r.Boottime = boot.ID, boot.Time
	}
	if err := clockoffset.Write(cfg.StateDir, r); err != nil {
		log.Warn("clock offset not saved", "err", err)
	}
	if err := os.MkdirAll(filepath.Dir(wire.ClockOffsetFile), 0o755); err != nil {
		log.Warn("clock offset not handed to the runner", "err", err)
	} else if err := clockoffset.WriteFile(wire.ClockOffsetFile, r); err != nil {
		log.Warn("clock offset not handed to the runner", "err", err)
	}
	if w := r.Warning(); w != "" {
		log.Warn(w)
	}
	if refusal := clockRefusal(r); refusal != "" {
		log.Error(refusal)
	}
}

// daemonLockPatience is how long the node's unit lock may stay held by an
// operator's one-shot command (node-agent apply, reconcile, remove, burst)
// before the agent applies the core's changes without it. It counts from
// the first wait that found the lock held, across the changes' waits: a
// change whose deadline comes first fails and the core retries it, so a
// command stopped with the lock held (Ctrl-Z, a debugger) delays the
// core's changes, disables among them, by about this much, and a change
// near its deadline never makes the agent go without the lock. Past it,
// behind the same holder, the agent claims the node and applies without
// the lock until it changes hands (unitmgr's claimWithout). A
// command's apply longer than this (a reconcile of 20,000 units whose
// reload takes a minute here) may then race the agent's, as every
// command did before the lock.
const daemonLockPatience = 30 * time.Second
