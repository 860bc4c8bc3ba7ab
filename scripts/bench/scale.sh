#!/bin/bash
# scale.sh — what the core costs per job at 1,000, 10,000 and 100,000 jobs
# (BenchmarkScale in internal/store: sweep pass, a shard's desired set,
# the job list page, outcome recording), and core-api's memory with
# 100,000 jobs in its database; each on a throwaway PostgreSQL (fsync on).
# Prints two tables; docs/scale.md extrapolates from them.
#   JOBS=1000,10000,100000 RSS_JOBS=100000 DURATION=60s scripts/bench/scale.sh
# SKIP_BENCH=1 or SKIP_RSS=1 leaves one part out.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pg=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 | grep -o '[0-9]*' | head -1)
echo "hostcron at scale, $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(date -u +%F), Go $(go env GOVERSION), PostgreSQL ${pg:-?}"

if [ -z "${SKIP_BENCH:-}" ]; then
  HOSTCRON_BENCH_SCALE_JOBS=${JOBS:-1000,10000,100000} \
    scripts/with-pg.sh go test -count=1 -run '^$' -bench '^BenchmarkScale$' -timeout 60m ./internal/store/ >"$out" 2>&1 ||
    { tail -40 "$out"; exit 1; }
  echo
  awk '
    /^BenchmarkScale\// {
      split($1, p, "/"); n = substr(p[2], 6); c = p[3]; sub(/-[0-9]+$/, "", c)
      if (!(n in seenN)) { seenN[n] = 1; sizes[++ns] = n }
      v[n "|" c "|ns"] = $3
      for (i = 5; i < NF; i += 2) v[n "|" c "|" $(i + 1)] = $i  # custom metrics, B/op, allocs/op
    }
    function t(ns) { return ns >= 1e9 ? sprintf("%.2f s", ns / 1e9) : ns >= 1e6 ? sprintf("%.1f ms", ns / 1e6) : sprintf("%.0f µs", ns / 1e3) }
    function us(x) { return x >= 1000 ? sprintf("%.2f ms", x / 1000) : x < 0.1 ? sprintf("%.4f µs", x) : sprintf("%.2f µs", x) }
    function commas(n,  s, r) { s = sprintf("%d", n); r = ""; while (length(s) > 3) { r = "," substr(s, length(s) - 2) r; s = substr(s, 1, length(s) - 3) } return s r }
    function row(label, c, kind,  i, n, cell) {
      printf "| %s |", label
      for (i = 1; i <= ns; i++) {
        n = sizes[i]
        if (!((n "|" c "|ns") in v)) { printf " not run |"; continue }
        if (kind == "job") cell = t(v[n "|" c "|ns"]) " (" us(v[n "|" c "|µs/job"]) "/job)"
        else if (kind == "alloc") cell = sprintf("%.1f MB (%d B/job)", v[n "|" c "|B/op"] / 1e6, v[n "|" c "|B/op"] / n)
        else if (kind == "bytes") cell = sprintf("%.1f MB (%d B/job)", v[n "|" c "|B/set"] / 1e6, v[n "|" c "|B/job"])
        else if (kind == "page") cell = us(v[n "|" c "|µs/page"])
        else if (kind == "disk") cell = sprintf("%d B/job, %d B/run (%s runs)", v[n "|" c "|B/job"], v[n "|" c "|B/run"], commas(v[n "|" c "|runs"]))
        else cell = us(v[n "|" c "|µs/outcome"])
        printf " %s |", cell
      }
      printf "\n"
    }
    END {
      printf "| per op (and per job) |"; for (i = 1; i <= ns; i++) printf " %s jobs |", commas(sizes[i]); printf "\n"
      printf "|---|"; for (i = 1; i <= ns; i++) printf "---|"; printf "\n"
      row("lost-run sweep pass, nothing due", "sweep_nothing_due", "job")
      row("lost-run sweep pass, every job one slot due (reported)", "sweep_all_due", "job")
      row("desired set of the shard: read (REPEATABLE READ) + JSON", "desired_set", "job")
      row("desired set: JSON size (the Temporal payload)", "desired_set", "bytes")
      row("desired set: Go memory allocated to read and encode it", "desired_set", "alloc")
      row("job list: a tenant of 1,000, page of 100", "list_page_100", "page")
      row("job list: a tenant of 1,000, page of 1,000 (API default)", "list_page_1000", "page")
      row("outcome recorded (success), one transaction, serial", "outcome_success", "outcome")
      row("outcome recorded (exit_code), one transaction, serial", "outcome_exit_code", "outcome")
      row("on disk, indexes included: cron_jobs per job (as seeded), cron_job_runs per run", "table_bytes", "disk")
    }' "$out"
fi

if [ -z "${SKIP_RSS:-}" ]; then
  echo
  echo "core-api with ${RSS_JOBS:-100000} jobs in its database (no Temporal: changes stay in the outbox), sweep every 5 s, grace 10 s:"
  echo
  RSS_JOBS=${RSS_JOBS:-100000} DURATION=${DURATION:-60s} scripts/with-pg.sh bash -c '
    set -euo pipefail
    bin=$(mktemp -d); trap "kill \$pid 2>/dev/null; wait \$pid 2>/dev/null; rm -rf $bin" EXIT
    go build -o "$bin/" ./cmd/core-api ./scripts/bench/scale
    port=$((40000 + RANDOM % 10000))
    dsn=${HOSTCRON_TEST_DATABASE_URL/\/postgres\?/\/hostcron?}
    key=bench-admin-key-0123456789abcdef0123
    HOSTCRON_ADMIN_KEY=$key "$bin/core-api" serve --database-url "$dsn" --listen 127.0.0.1:$port \
      --metrics-addr "" --sweep-interval 5s --outcome-grace 10s 2>"$bin/api.log" &
    pid=$!
    for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
    sleep 2
    "$bin/scale" -api "http://127.0.0.1:$port" -admin-key $key -dsn "$dsn" -pid $pid -jobs "$RSS_JOBS" -duration "$DURATION"
  '
fi
