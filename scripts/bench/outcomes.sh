#!/bin/bash
# outcomes.sh — outcomes/s the core API sustains over HTTP, on a throwaway
# PostgreSQL (fsync on) and freshly built core-apis on the same database:
#   batched    this tree, outcomes in group commits (the default)
#   unbatched  this tree with --unbatched-outcomes: a transaction each
#   before     BASELINE_REV's core-api (default main), if it differs from HEAD
# Prints one table: steady rounds at each concurrency, then a
# top-of-minute burst of BURST_JOBS outcomes from 3 simulated nodes, with
# what each mode lost or doubled. The modes run one after another on a
# machine others may share: compare them within one run.
#   DURATION=10s WORKERS=8,32 BURST_JOBS=10000 BASELINE_REV=main scripts/bench/outcomes.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
baseline=${BASELINE_REV-main}
if [ -n "$baseline" ] && [ "$(git rev-parse "$baseline")" = "$(git rev-parse HEAD)" ]; then baseline=""; fi
export BASELINE_REV=$baseline
exec scripts/with-pg.sh bash -c '
  set -euo pipefail
  bin=$(mktemp -d); pids=()
  trap "kill \${pids[*]} 2>/dev/null; wait 2>/dev/null; rm -rf $bin" EXIT
  go build -o "$bin/" ./cmd/core-api ./scripts/bench/outcomes
  if [ -n "$BASELINE_REV" ]; then
    mkdir "$bin/before-src"
    git archive "$BASELINE_REV" | tar -x -C "$bin/before-src"
    (cd "$bin/before-src" && go build -o "$bin/core-api-before" ./cmd/core-api)
  fi
  dsn=${HOSTCRON_TEST_DATABASE_URL/\/postgres\?/\/hostcron?}
  key=bench-admin-key-0123456789abcdef0123
  "$bin/core-api" migrate --database-url "$dsn"
  apis=""
  modes="batched unbatched"; [ -n "$BASELINE_REV" ] && modes="$modes before"
  for mode in $modes; do
    port=$((40000 + RANDOM % 10000))
    cmd=("$bin/core-api" serve --database-url "$dsn" --listen 127.0.0.1:$port --metrics-addr "" \
      --sweep-interval 1h --converge-every 0) # no lost-run sweeps of the bench'"'"'s jobs in the measurement
    [ $mode = unbatched ] && cmd+=(--unbatched-outcomes)
    [ $mode = before ] && cmd[0]=$bin/core-api-before
    HOSTCRON_ADMIN_KEY=$key "${cmd[@]}" 2>"$bin/api-$mode.log" &
    pids+=($!)
    for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
    apis="$apis${apis:+,}$mode=http://127.0.0.1:$port"
  done
  echo "core-api outcomes over HTTP, $(nproc) cores, $(date -u +%F), before = ${BASELINE_REV:-none} ($(git rev-parse --short "${BASELINE_REV:-HEAD}"))"
  "$bin/outcomes" -apis "$apis" -admin-key $key -database-url "$dsn" -duration "${DURATION:-10s}" -workers "${WORKERS:-8,32}" \
    -burst-jobs "${BURST_JOBS:-10000}"
'
