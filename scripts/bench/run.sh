#!/bin/bash
# run.sh — hostcron's benchmarks on this machine, printed as one table:
#   1. converge N jobs onto a real node: one reconcile vs the naive loop
#      (write + daemon-reload + enable --now per job)
#   2. reconcile with nothing changed at 10,000 timers
#   3. API create -> active on 3 nodes, p50/p99 over 50 creates
#   4. outcomes/s the core API sustains over HTTP
#   5. election latency: first timer of a slot -> elected run's start
# Needs root (booted nodes). Env: BENCH_JOBS (1000), BENCH_TIMERS (10000),
# BENCH_SLOTS (20), BENCH_NAIVE_JOBS (BENCH_JOBS; the naive loop's count,
# which takes about 11 minutes at 1,000), BENCH_BASE_AGENT (a node-agent
# binary to time beside this tree's, in the same run: before/after rows),
# BENCH_ROUNDS (1; step 1's converges per agent, alternating, medians).
# The converge and no-op benchmarks also print PHASES lines: where each
# observe and apply spent its time (in the log, not the table).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
scripts/with-pg.sh go test -count=1 -tags 'e2e bench' -timeout 60m -v ./tests/bench/ >>"$out" 2>&1 || { tail -40 "$out"; exit 1; }
scripts/with-pg.sh go test -count=1 -tags e2e -timeout 20m -v -run TestCreateActivatesOnAllNodes ./tests/flow/ >>"$out" 2>&1 || { tail -40 "$out"; exit 1; }
outcomes=$(DURATION=${DURATION:-10s} WORKERS=${WORKERS:-32} scripts/bench/outcomes.sh | awk -F'|' '/^\| [0-9]/{print $5}' | tr -d ' ' | tail -1)
echo "hostcron benchmarks, $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(date -u +%F), Go $(go env GOVERSION)"
echo
echo "| benchmark | result |"
echo "|---|---|"
val() { grep "$1" "$out" | grep -o "$2=[0-9.]*" | head -1 | cut -d= -f2; }
for a in base new; do
  grep -q "BENCH agent=$a " "$out" || continue
  echo "| ($a agent) converge $(val "agent=$a converge" converge_jobs) jobs on one empty node: reconcile (median of $(val "agent=$a converge" rounds)) | $(val "agent=$a converge" reconcile_s) s |"
  echo "| ($a agent) first reconcile of $(val "agent=$a noop" timers) jobs onto an empty node | $(val "agent=$a noop" first_s) s |"
  echo "| ($a agent) reconcile, nothing changed, $(val "agent=$a noop" timers) timers (median of 3) | $(val "agent=$a noop" noop_median_s) s |"
done
echo "| converge $(val ratio= converge_jobs) jobs: reconcile (this tree) | $(val ratio= reconcile_s) s |"
echo "| same, naive loop (write + daemon-reload + enable --now per job) | $(val ratio= naive_s) s |"
echo "| ratio naive / reconcile | $(val ratio= ratio)x |"
echo "| API create -> active on 3 nodes, p50 / p99 (50 creates) | $(grep -o 'create_to_active.*p50_ms=[0-9]*' "$out" | grep -o 'p50_ms=[0-9]*' | cut -d= -f2) ms / $(grep -o 'create_to_active.*p99_ms=[0-9]*' "$out" | grep -o 'p99_ms=[0-9]*' | cut -d= -f2) ms |"
echo "| outcomes recorded over HTTP (32 workers) | $outcomes /s |"
echo "| election latency, first timer -> run start, p50 / p99 | $(grep -o 'election.*' "$out" | grep -o 'p50_ms=[0-9.]*' | cut -d= -f2) ms / $(grep -o 'election.*' "$out" | grep -o 'p99_ms=[0-9.]*' | cut -d= -f2) ms |"
