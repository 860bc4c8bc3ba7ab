#!/bin/bash
# outcomes.sh — outcomes/s the core API sustains over HTTP, on a throwaway
# PostgreSQL (fsync on) and a freshly built core-api. Prints a table.
#   DURATION=10s WORKERS=8,32 scripts/bench/outcomes.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/with-pg.sh bash -c '
  set -euo pipefail
  bin=$(mktemp -d); trap "kill \$pid 2>/dev/null; wait \$pid 2>/dev/null; rm -rf $bin" EXIT
  go build -o "$bin/" ./cmd/core-api ./scripts/bench/outcomes
  port=$((40000 + RANDOM % 10000))
  dsn=${HOSTCRON_TEST_DATABASE_URL/\/postgres\?/\/hostcron?}
  HOSTCRON_ADMIN_KEY=bench-admin-key-0123456789abcdef0123 "$bin/core-api" serve --database-url "$dsn" --listen 127.0.0.1:$port 2>"$bin/api.log" &
  pid=$!
  for _ in $(seq 1 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  echo "core-api outcomes over HTTP, $(nproc) cores, $(date -u +%F)"
  "$bin/outcomes" -api "http://127.0.0.1:$port" -admin-key bench-admin-key-0123456789abcdef0123 -duration "${DURATION:-10s}" -workers "${WORKERS:-8,32}"
'
