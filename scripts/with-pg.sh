#!/bin/bash
# with-pg.sh CMD... — run CMD with a throwaway PostgreSQL cluster; its admin
# DSN is in HOSTCRON_TEST_DATABASE_URL. The cluster is removed afterwards,
# also when CMD fails or is interrupted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/hostcron-pg.XXXXXX)
chmod 755 "$dir"
port=${PGPORT_TEST:-$((50000 + RANDOM % 10000))}
cleanup() { "$here/pg.sh" stop "$dir/pg" || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$here/pg.sh" start "$dir/pg" "$port" >/dev/null
export HOSTCRON_TEST_DATABASE_URL="postgres://hostcron@127.0.0.1:$port/postgres?sslmode=disable"
"$@"
