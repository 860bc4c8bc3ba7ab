#!/bin/bash
# sweep.sh — one lost-run sweep pass over N active jobs: the set-based pass
# (sweep_due_at index, batches) against the per-job pass it replaced, in
# the same run, on a throwaway PostgreSQL (fsync on). Prints a table.
#   JOBS=1000,10000,100000 PERJOB_MAX=10000 PASSES=1 scripts/bench/sweep.sh
# PERJOB_MAX: the largest size the per-job pass is run at (a pass of it at
# 100,000 jobs takes minutes); PASSES: timed passes per case (ns/op is
# their mean).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
HOSTCRON_BENCH_SWEEP_JOBS=${JOBS:-1000,10000,100000} HOSTCRON_BENCH_SWEEP_PERJOB_MAX=${PERJOB_MAX:-10000} \
  scripts/with-pg.sh go test -count=1 -run '^$' -bench '^BenchmarkSweep$' -benchtime "${PASSES:-1}x" -timeout 120m \
  ./internal/store/ >"$out" 2>&1 || { tail -40 "$out"; exit 1; }
pg=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 | grep -o '[0-9]*' | head -1)
echo "lost-run sweep, one pass (timeout 60 s, grace 2 min), $(nproc) cores, $(date -u +%F), Go $(go env GOVERSION), PostgreSQL $pg"
echo
awk '
  /^BenchmarkSweep\// {
    split($1, p, "/"); n = substr(p[2], 6); c = p[3]; impl = p[4]; sub(/-[0-9]+$/, "", impl)
    ns[n "|" c "|" impl] = $3; lost[n "|" c] = $5
    if (!(n "|" c in seen)) { seen[n "|" c] = 1; order[++k] = n "|" c }
  }
  function fmt(v) { return v >= 1e9 ? sprintf("%.2f s", v / 1e9) : sprintf("%.1f ms", v / 1e6) }
  END {
    print "| jobs | case | lost runs recorded | per-job pass (before) | set-based pass | per job, set-based | ratio |"
    print "|---|---|---|---|---|---|---|"
    for (i = 1; i <= k; i++) {
      split(order[i], q, "|"); key = order[i]
      old = ns[key "|per-job"]; new = ns[key "|batched"]
      printf "| %s | %s | %s | %s | %s | %.1f µs | %s |\n", q[1], q[2], lost[key], (old ? fmt(old) : "not run"),
        fmt(new), new / q[1] / 1e3, (old ? sprintf("%.0fx", old / new) : "")
    }
  }' "$out"
