package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/hostcron/hostcron/internal/nodeconf"
	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/unitmgr"
)

// startsEvery is how often the agent looks for runs its node has started
// and tells the core (the API's "running"); a run shorter than this may
// never show as running, which costs nothing: its outcome is its record.
const startsEvery = 2 * time.Second

// startsLoop reports each run this node starts, once, until ctx ends.
// A report the core refuses for good is not sent again; one that failed
// otherwise (the core unreachable) is tried at the next look, while the
// run still runs.
func startsLoop(ctx context.Context, cfg nodeconf.Config, m *unitmgr.Manager, log *slog.Logger) {
	client := outcome.Client{BaseURL: cfg.APIURL, Credential: cfg.Credential, HTTP: &http.Client{Timeout: 5 * time.Second}}
	reported := map[string]bool{}
	t := time.NewTicker(startsEvery)
	defer t.Stop()
	for {
		running, err := m.Running(ctx, func(inv string) bool { return reported[inv] })
		if err != nil && ctx.Err() == nil {
			log.Warn("cannot list running cron services", "err", err)
		}
		var post []unitmgr.Started
		post, reported = startsToReport(running, reported)
		for _, st := range post {
			err := client.PostStart(ctx, st.JobID, st.RunStart)
			switch {
			case err == nil, errors.Is(err, outcome.ErrPermanent):
				reported[st.InvocationID] = true
			case ctx.Err() == nil:
				log.Debug("run start not reported yet", "run_key", st.RunKey, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startsToReport decides which running runs to report: those of an
// activation (invocation) not reported yet, one report per activation. It
// returns them and the reported set without activations no longer
// running, so the set stays as small as the node's running runs.
func startsToReport(running []unitmgr.Started, reported map[string]bool) (post []unitmgr.Started, keep map[string]bool) {
	keep = make(map[string]bool, len(running))
	for _, st := range running {
		if reported[st.InvocationID] {
			keep[st.InvocationID] = true
			continue
		}
		post = append(post, st)
	}
	return post, keep
}
