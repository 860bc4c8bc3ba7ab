#!/bin/bash
# pg.sh — a throwaway PostgreSQL cluster from the installed binaries.
#
#   pg.sh start DIR [PORT]   initdb (if needed) and start; prints the DSN
#   pg.sh stop DIR           stop it (fast shutdown)
#   pg.sh dsn DIR            print the DSN of a started cluster
#
# initdb refuses to run as root, so the cluster belongs to the postgres user.
set -euo pipefail

pgbin() {
  local d; d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$d" ]; then
    echo "[pg] installing postgresql" >&2
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
    d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$d"
}

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

cmd=${1:-}; dir=${2:-}
[ -n "$dir" ] || { sed -n '2,8p' "$0"; exit 2; }
case $cmd in
  start)
    port=${3:-55432}
    bin=$(pgbin)
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
    mkdir -p "$dir"; chown postgres: "$dir"; chmod 700 "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
      as_pg "$bin/initdb" -D "$dir/data" -U hostcron --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
        || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    echo "$port" >"$dir/port"; chown postgres: "$dir/port"
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on" >/dev/null \
      || { tail -20 "$dir/server.log" >&2; exit 1; }
    as_pg "$bin/psql" -h "$dir" -p "$port" -U hostcron -d postgres -qtAc \
      "SELECT 1 FROM pg_database WHERE datname='hostcron'" | grep -q 1 \
      || as_pg "$bin/createdb" -h "$dir" -p "$port" -U hostcron hostcron
    echo "postgres://hostcron@127.0.0.1:$port/hostcron?sslmode=disable" ;;
  stop)
    [ -f "$dir/data/postmaster.pid" ] || exit 0
    as_pg "$(pgbin)/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null ;;
  dsn)
    echo "postgres://hostcron@127.0.0.1:$(cat "$dir/port")/hostcron?sslmode=disable" ;;
  *) sed -n '2,8p' "$0"; exit 2 ;;
esac
