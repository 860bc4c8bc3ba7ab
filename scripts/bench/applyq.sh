#!/bin/bash
# applyq.sh — the node's apply queue (issue 16) on a real systemd node: a
# burst of changes (new schedule, so a timer file and a reload each) to a
# node holding T cron timers, applied as the daemon's activities bring
# them (each change queued at once, completed when the queue answers)
# against one by one (a sample of BENCH_BURST_SERIAL, scaled to the
# burst), and the agent's peak RSS (VmHWM) after converging T timers and
# taking the burst. BENCH_BURST_SLOTS=128,0 runs the batched burst once
# with each bound on changes in flight (128: as when each waiting change
# held one of the agent's 128 activity slots; 0: none, the daemon's way),
# an A/B in one run.
#   BENCH_BURST_TIMERS=1000,3000 BENCH_BURST_CHANGES=1000 BENCH_BURST_SERIAL=10 scripts/bench/applyq.sh
# ELECTION=1 also runs TestElectionDuringBurst: every node of the shard
# takes such a burst (BENCH_BURST_ELECTION_TIMERS timers, default 1000)
# while a 10-second job runs; prints its election latency.
# Needs root (booted nodes).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export BENCH_BURST_TIMERS=${BENCH_BURST_TIMERS:-1000,3000} BENCH_BURST_CHANGES=${BENCH_BURST_CHANGES:-1000} BENCH_BURST_SERIAL=${BENCH_BURST_SERIAL:-10}
tests='^TestApplyBurst$'
[ -n "${ELECTION:-}" ] && tests='^(TestApplyBurst|TestElectionDuringBurst)$'
scripts/with-pg.sh go test -count=1 -tags 'e2e bench' -timeout 120m -v -run "$tests" ./tests/bench/ >"$out" 2>&1 || { tail -40 "$out"; exit 1; }
echo "hostcron apply queue, $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(date -u +%F), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| timers on the node | changes | in flight (0: all) | batched: time / plans / reloads (reload time) | one by one: reloads, time (measured on a sample) | agent VmHWM |"
echo "|---|---|---|---|---|---|"
{ grep -o 'BENCH applyq .*' "$out" || true; } | awk '{
  for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  printf "| %s | %s | %s | %.1f s / %s / %s (%.1f s) | %s, %.0f s est. (%s in %.1f s, %.0f ms each) | %.1f MB (%s) |\n",
    v["timers"], v["changes"], v["slots"], v["batched_s"], v["batched_plans"], v["batched_reloads"], v["batched_reload_s"],
    v["changes"], v["serial_est_s"], v["serial_changes"], v["serial_s"], v["serial_ms_per_change"], v["rss_mb"],
    (v["reconcile_s"] + 0 > 0 ? "converge and burst" : "burst only")
}'
{ grep -o 'BENCH election_during_burst .*' "$out" || true; } | awk '{
  for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
  printf "\nelection latency while every node takes %s changes at %s timers (%.0f s; reloads %s): p50 %s ms, p99 %s ms, max %s ms over %s slots\n",
    v["changes"], v["timers"], v["burst_s"], v["reloads"], v["p50_ms"], v["p99_ms"], v["max_ms"], v["slots"]
}'
