package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/hostcron/hostcron/internal/store"
	"github.com/hostcron/hostcron/workflows"
)

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
