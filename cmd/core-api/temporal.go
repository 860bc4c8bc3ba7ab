package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/workflows"
)

// dialTemporal connects, retrying until ctx ends: the API must come up
// and keep accepting changes (into the outbox) while Temporal starts.
func dialTemporal(ctx context.Context, addr, namespace string, log *slog.Logger) (client.Client, error) {
	for {
		c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: namespace,
			Logger: tlog.NewStructuredLogger(log.With("component", "temporal"))})
		if err == nil {
			return c, nil
		}
		log.Warn("temporal not reachable yet", "address", addr, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial temporal: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// startCoreWorker runs the core's workflows and activities.
func startCoreWorker(c client.Client, st *store.Store) (worker.Worker, error) {
	w := worker.New(c, workflows.CoreTaskQueue, worker.Options{})
	workflows.RegisterCore(w, &workflows.CoreActivities{Store: st})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start core worker: %w", err)
	}
	return w, nil
}

// converger starts node converges for the API's announce endpoint.
type converger struct {
	client      client.Client
	nodeTimeout time.Duration
}

func (v converger) ConvergeNode(ctx context.Context, nodeID string) error {
	_, err := workflows.StartConvergeNode(ctx, v.client, nodeID, v.nodeTimeout)
	return err
}
