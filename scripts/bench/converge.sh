#!/bin/bash
# converge.sh — a new node's converge of a whole shard through the control
# path (PostgreSQL, embedded Temporal, the node reading its desired set in
# pages, one reconcile), then its converge with nothing changed, and the
# agent's peak RSS. Needs root (a booted node). Env: BENCH_CONVERGE_JOBS
# (10000).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
scripts/with-pg.sh go test -count=1 -tags 'e2e bench' -timeout 40m -v ./tests/bench/temporal/ >"$out" 2>&1 || { tail -40 "$out"; exit 1; }
line=$(grep -o 'BENCH temporal_converge.*' "$out")
val() { grep -o "$1=[0-9.]*" <<<"$line" | cut -d= -f2; }
echo "hostcron converge through Temporal, $(nproc) cores, $(date -u +%F), Go $(go env GOVERSION)"
echo
echo "| measure | result |"
echo "|---|---|"
echo "| new node converges a shard of $(val jobs) jobs (workflow start -> end) | $(val converge_s) s, $(val timers) active timers |"
echo "| same node, nothing changed (agent restarted, announces again): a full converge that plans nothing | $(val noop_s) s |"
echo "| again (agent restarted): the fast path (the core's digest, the node's fingerprint) | $(val fast_s) s |"
echo "| again (agent restarted): the fast path, the core's digest from its cache (nothing changed since it was asked) | $(val fast_cached_s) s |"
echo "| node-agent peak RSS (VmHWM) after the first converge | $(( $(val agent_hwm_kb) / 1024 )) MiB |"
echo "| node-agent peak RSS (VmHWM) of the restarted agent after its full no-op converge | $(( $(val agent_hwm_after_noop_kb) / 1024 )) MiB |"
echo "| node-agent peak RSS (VmHWM) of the restarted agent after its fast converge | $(( $(val agent_hwm_after_fast_kb) / 1024 )) MiB |"
echo
echo "Where each converge's time went (workflow history, then the agent's lines):"
grep '^PHASE' "$out" || true
