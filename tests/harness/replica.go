//go:build e2e

package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hostcron/hostcron/internal/core"
	"github.com/hostcron/hostcron/internal/dispatch"
	"github.com/hostcron/hostcron/internal/housekeeping"
)

// ReplicaOptions choose how a further core-api replica runs.
type ReplicaOptions struct {
	// Listen is its address; empty: a free port on 127.0.0.1. The
	// primary's address (APIAddr, after StopAPI) makes it the API the
	// nodes report outcomes to.
	Listen string
	// Housekeeping runs its sweeper (nil: off); replicas compete for the
	// housekeeping lead as deployed ones do.
	Housekeeping *housekeeping.Config
	// DispatchTestHooks are its dispatcher's fault points.
	DispatchTestHooks *dispatch.TestHooks
	// Name labels its log lines.
	Name string
	// ConvergeEvery creates the periodic converge schedule with this
	// interval (core-api's --converge-every; 0: none). The schedule
	// outlives the replica: a test that sets it deletes it.
	ConvergeEvery time.Duration
}

// Replica is a core (internal/core) beside the cluster's own, on the same
// database and Temporal, as a second core-api process would be.
type Replica struct {
	Name string
	URL  string
	core *core.Core
}

// APIAddr is the cluster's own API address; it stays the same across
// StopAPI and StartAPI.
func (c *Cluster) APIAddr() string { return c.apiAddr }

// StartReplica starts another core-api on the cluster's database and
// Temporal, with the cluster's trust material.
func (c *Cluster) StartReplica(opts ReplicaOptions) (*Replica, error) {
	listen := opts.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", opts.Name)
	cfg := core.Config{
		DatabaseURL: c.db.DSN, MaxConns: 20, Listen: listen, AdminKey: AdminKey, Log: log,
		TemporalAddress: c.temporalAddr, NodeTimeout: c.opts.NodeTimeout, LokiURL: c.LokiURL,
		Trust: c.coreTrust(), Housekeeping: opts.Housekeeping, DispatchTestHooks: opts.DispatchTestHooks,
		ConvergeEvery: opts.ConvergeEvery,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k, err := core.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start replica %s: %w", opts.Name, err)
	}
	return &Replica{Name: opts.Name, URL: "http://" + k.Addr(), core: k}, nil
}

// Stop stops the replica as core-api's SIGTERM does; stopping it twice is
// harmless.
func (r *Replica) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return r.core.Stop(ctx)
}
