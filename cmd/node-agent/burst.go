package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/unitmgr"
	"github.com/hostcron/hostcron/internal/wire"
)

// burstReport is what `node-agent burst` measured.
type burstReport struct {
	Changes     int      `json:"changes"`
	Concurrency int      `json:"concurrency"`
	Plans       int      `json:"plans"`     // plan+apply runs: batches of the apply queue
	Reloads     int      `json:"reloads"`   // daemon-reloads they issued
	ReloadMS    int64    `json:"reload_ms"` // the reloads' time, summed
	TookMS      int64    `json:"took_ms"`   // first change queued to last one applied
	ReconcileMS int64    `json:"reconcile_ms,omitempty"`
	Failed      []string `json:"failed,omitempty"`
	// VmHWMKB is this process's peak resident memory (VmHWM) at the end:
	// with --set, that of an agent that converged the set, then took the burst.
	VmHWMKB int64 `json:"vm_hwm_kb"`
}

// countingObserver counts the manager's plan+apply runs and reloads.
type countingObserver struct {
	mu             sync.Mutex
	plans, reloads int
	reloadTime     time.Duration
}

func (o *countingObserver) Applied(string, bool, time.Duration, map[string]int, error, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.plans++
}

func (o *countingObserver) Reloaded(took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reloads++
	o.reloadTime += took
}

// burstCmd applies each job as its own change, all queued at once as the
// core's job workflows send them to the daemon (one activity per change,
// each queued without waiting: ApplyThen), or as --concurrency N Apply
// calls at most at once: the apply queue's batching, for tests and
// benchmarks. --concurrency 1 is the one-by-one baseline.
func burstCmd(configPath *string, log *slog.Logger) *cobra.Command {
	var file, set string
	var concurrency int
	cmd := &cobra.Command{
		Use:   "burst --file JOBS.json [--set ALL.json] [--concurrency N]",
		Short: "Apply each job as its own concurrent change, as the daemon's activities do, and print reloads, time and peak memory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jobs, err := readJobs(file)
			if err != nil {
				return err
			}
			return useManager(cmd.Context(), *configPath, log, func(m *unitmgr.Manager) error {
				rep, err := burst(cmd.Context(), m, jobs, set, max(0, concurrency))
				if err != nil {
					return err
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			})
		},
	}
	cmd.Flags().StringVar(&file, "file", "-", "JSON array of jobs, each applied as its own change (- for stdin)")
	cmd.Flags().StringVar(&set, "set", "", "JSON array of jobs to reconcile the node to first, exactly: removes every other cron unit, leaves no tombstones (benchmark nodes only; not counted)")
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "Apply calls in flight at once; 0: every change queued at once, as the daemon's activities do")
	return cmd
}

func burst(ctx context.Context, m *unitmgr.Manager, jobs []wire.Job, setPath string, concurrency int) (burstReport, error) {
	out := burstReport{Changes: len(jobs), Concurrency: concurrency}
	obs := &countingObserver{}
	m.SetObserver(obs)
	if setPath != "" {
		all, err := readJobs(setPath)
		if err != nil {
			return out, err
		}
		start := time.Now()
		if _, err := m.ReconcileExactly(ctx, all); err != nil {
			return out, fmt.Errorf("reconcile the set first: %w", err)
		}
		out.ReconcileMS = time.Since(start).Milliseconds()
	}
	obs.mu.Lock()
	obs.plans, obs.reloads, obs.reloadTime = 0, 0, 0 // the burst's only
	obs.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, max(1, concurrency))
	record := func(j wire.Job, rep wire.NodeReport, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out.Failed = append(out.Failed, fmt.Sprintf("%s: %v", j.UnitName(), err))
		}
		out.Failed = append(out.Failed, rep.Failed...)
	}
	start := time.Now()
	for _, j := range jobs {
		wg.Add(1)
		if concurrency == 0 { // queued at once, answered later
			if err := m.ApplyThen(ctx, []wire.Job{j}, func(rep wire.NodeReport, err error) {
				record(j, rep, err)
				wg.Done()
			}); err != nil {
				record(j, wire.NodeReport{}, err)
				wg.Done()
			}
			continue
		}
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			rep, err := m.Apply(ctx, []wire.Job{j})
			record(j, rep, err)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done(): // a queued change dropped with it is never answered
		mu.Lock() // answers may still come
		defer mu.Unlock()
		out.Failed = slices.Clip(slices.Clone(out.Failed))
		return out, fmt.Errorf("burst: %w", ctx.Err())
	}
	out.TookMS = time.Since(start).Milliseconds()
	obs.mu.Lock()
	out.Plans, out.Reloads, out.ReloadMS = obs.plans, obs.reloads, obs.reloadTime.Milliseconds()
	obs.mu.Unlock()
	out.VmHWMKB = peakRSSKB()
	return out, nil
}

// peakRSSKB reads VmHWM from /proc/self/status (0 if it cannot).
func peakRSSKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
