#!/bin/bash
# with-pg.sh CMD... — run CMD with a throwaway PostgreSQL cluster; its admin
# DSN is in HOSTCRON_TEST_DATABASE_URL. The cluster is removed afterwards,
# also when CMD fails or is interrupted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/hostcron-pg.XXXXXX)
chmod 755 "$dir"
cleanup() { "$here/pg.sh" stop "$dir/pg" || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
# A port above the kernel's ephemeral range (32768-60999 by default), so
# no outgoing connection holds it; another test cluster may, so a port
# that cannot be bound is traded for another (seen: "could not create
# any TCP/IP sockets").
for attempt in 1 2 3 4 5; do
  port=${PGPORT_TEST:-$((61000 + RANDOM % 4000))}
  "$here/pg.sh" start "$dir/pg" "$port" >/dev/null && break
  [ -z "${PGPORT_TEST:-}" ] && [ "$attempt" -lt 5 ] || exit 1
  echo "with-pg: port $port is taken; trying another" >&2
done
export HOSTCRON_TEST_DATABASE_URL="postgres://hostcron@127.0.0.1:$port/postgres?sslmode=disable"
"$@"
