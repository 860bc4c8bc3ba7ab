#!/bin/bash
# with-pg.sh CMD... — run CMD with a throwaway PostgreSQL cluster; its admin
# DSN is in HOSTCRON_TEST_DATABASE_URL. The cluster is removed afterwards,
# also when CMD fails or is interrupted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# A with-pg.sh killed outright (SIGKILL, the machine stopped) never ran
# its cleanup, and its postgres runs on: reap the clusters whose owner is
# gone. A live owner is a with-pg.sh process (its PID in owner, its
# command line naming this script); a PID come round to anyone else is
# not. Side by side runs take turns (flock).
# names PID TEXT: whether process PID's command line contains TEXT.
names() { [ -n "$1" ] && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF -- "$2"; }
exec 9>/tmp/hostcron-pg.reap.lock
flock 9
for old in /tmp/hostcron-pg.*/; do
  [ -f "$old/owner" ] || continue
  owner=$(cat "$old/owner")
  names "$owner" with-pg.sh && continue
  echo "with-pg: reaping $old (its with-pg.sh, PID $owner, is gone)" >&2
  # Its postmaster only (its command line names the cluster): after a
  # restart the PID in postmaster.pid may be anyone's.
  pm=$(head -1 "$old/pg/data/postmaster.pid" 2>/dev/null || true)
  if names "$pm" "$old"; then
    "$here/pg.sh" stop "$old/pg" >/dev/null 2>&1 || true
  fi
  rm -rf "$old"
done
dir=$(mktemp -d /tmp/hostcron-pg.XXXXXX)
chmod 755 "$dir"
echo $$ >"$dir/owner"
exec 9>&-
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
