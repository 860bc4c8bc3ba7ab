package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/hostcron/hostcron/internal/metrics"
	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/internal/wire"
	"github.com/hostcron/hostcron/workflows"
)

// ErrTemporalUnavailable: the core has no Temporal connection (yet).
var ErrTemporalUnavailable = errors.New("temporal not connected")

// Link is the core's connection to Temporal. core-api starts without
// Temporal (changes wait in the outbox and the API keeps serving); Run
// dials in the background, retrying, and once connected starts the core
// worker, the converge schedule and the outbox dispatcher.
type Link struct {
	Addr, Namespace string
	Secure          func(*client.Options) error // TLS and payload codec; nil: plain (development)
	Store           *store.Store
	Log             *slog.Logger
	NodeTimeout     time.Duration
	ConvergeEvery   time.Duration
	Hooks           *TestHooks    // fault points for tests; nil in production
	Metrics         *metrics.Core // dispatch lag, provisioning verdicts; nil: not counted

	client atomic.Pointer[client.Client]
}

// Run connects and dispatches until ctx ends, then stops the worker and
// closes the client.
func (l *Link) Run(ctx context.Context) {
	c, err := workflows.Dial(ctx, l.Addr, l.Namespace, l.Secure, l.Log)
	if err != nil {
		return // ctx ended before Temporal answered
	}
	defer c.Close()
	w, err := workflows.StartCoreWorker(c, CountingStore{CoreStore: l.Store, Metrics: l.Metrics})
	if err != nil {
		l.Log.Error("no core worker; changes wait in the outbox", "err", err)
		return
	}
	defer w.Stop()
	if l.ConvergeEvery > 0 { // 0: no schedule (one that exists keeps running)
		if err := workflows.EnsureConvergeSchedule(ctx, c, l.ConvergeEvery); err != nil {
			l.Log.Warn("no periodic converge", "err", err)
		}
	}
	l.client.Store(&c)
	defer l.client.Store(nil)
	l.Log.Info("temporal connected; dispatching the outbox", "address", l.Addr)
	d := &Dispatcher{Store: l.Store, Temporal: c, Log: l.Log, NodeTimeout: l.NodeTimeout, Hooks: l.Hooks, Metrics: l.Metrics}
	d.Run(ctx)
}

// CountingStore is the core worker's store: it counts the provisioning
// verdicts the job workflows record (hostcron_provisionings_total).
type CountingStore struct {
	workflows.CoreStore
	Metrics *metrics.Core
}

// SetProvisioned records the verdict and counts it: its status when
// recorded, superseded when the job had moved on; an error counts nothing
// (the activity is retried).
func (s CountingStore) SetProvisioned(ctx context.Context, jobID string, version int64, status wire.Status, message string, took int) (bool, error) {
	set, err := s.CoreStore.SetProvisioned(ctx, jobID, version, status, message, took)
	if err == nil {
		s.Metrics.Provisioned(status, set)
	}
	return set, err
}

func (l *Link) get() client.Client {
	if p := l.client.Load(); p != nil {
		return *p
	}
	return nil
}

// ConvergeNode starts (or joins) a node's converge; the API's announce
// endpoint calls it.
func (l *Link) ConvergeNode(ctx context.Context, nodeID string) error {
	c := l.get()
	if c == nil {
		return ErrTemporalUnavailable
	}
	return workflows.Converger{Client: c, NodeTimeout: l.NodeTimeout}.ConvergeNode(ctx, nodeID)
}

// Check reports whether Temporal answers, for /healthz.
func (l *Link) Check(ctx context.Context) error {
	c := l.get()
	if c == nil {
		return ErrTemporalUnavailable
	}
	_, err := c.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}
