#!/bin/bash
# dev.sh — run hostcron on this machine: a local PostgreSQL, the embedded
# Temporal server, the core API, and three systemd nodes (systemd-nspawn)
# on shared storage, each with a node agent. Ctrl-C tears everything down.
#
# Env: DEV_DIR (state, default /run/hostcron-dev), API_PORT (8080),
#      TEMPORAL_PORT (7233), PG_PORT (55432), NODES (3), LOKI=1 (also run
#      Loki on :3100 and ship cron logs to it).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
DEV_DIR=${DEV_DIR:-/run/hostcron-dev}
API_PORT=${API_PORT:-8080} TEMPORAL_PORT=${TEMPORAL_PORT:-7233} PG_PORT=${PG_PORT:-55432} NODES=${NODES:-3}
export NODES_DIR=$DEV_DIR/nodes SHARED=$DEV_DIR/shared HOSTCRON_ADMIN_KEY=${HOSTCRON_ADMIN_KEY:-dev-admin-key-0123456789abcdef0123456789}
log() { echo "[dev $(date +%T)] $*" >&2; }
[ "$(id -u)" = 0 ] || { log "needs root (systemd-nspawn, PostgreSQL as the postgres user)"; exit 1; }
[ ! -e "$DEV_DIR" ] || { log "$DEV_DIR exists: is another 'make dev' running? (remove it if not)"; exit 1; }

pids=()
cleanup() {
  trap - EXIT INT TERM
  log "tearing down"
  scripts/nodes.sh down >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  scripts/pg.sh stop "$DEV_DIR/pg" 2>/dev/null || true
  rm -rf "$DEV_DIR"
  log "done"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/ensure-deps.sh
mkdir -p "$DEV_DIR"/{bin,conf,logs} "$SHARED/www/acme/public"
chmod 755 "$DEV_DIR"
log "building"
make --no-print-directory packages BIN="$DEV_DIR/bin" DIST="$DEV_DIR/dist" >"$DEV_DIR/logs/build.log" 2>&1 \
  || { cat "$DEV_DIR/logs/build.log"; exit 1; }
go build -o "$DEV_DIR/bin/bootstrap" ./scripts/dev/bootstrap
(cd devtools/temporal && go build -o "$DEV_DIR/bin/temporal-dev" .)

wait_for() { # URL-or-command, what
  for _ in $(seq 1 300); do eval "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  log "$2 did not come up"; return 1
}

dsn=$(scripts/pg.sh start "$DEV_DIR/pg" "$PG_PORT")
log "PostgreSQL on :$PG_PORT"
"$DEV_DIR/bin/temporal-dev" --port "$TEMPORAL_PORT" --db-file "$DEV_DIR/temporal.db" 2>"$DEV_DIR/logs/temporal.log" &
pids+=($!)
wait_for "grep -q 'temporal ready' $DEV_DIR/logs/temporal.log" Temporal
log "Temporal on :$TEMPORAL_PORT"
loki_url=
if [ "${LOKI:-0}" = 1 ]; then
  scripts/loki.sh build
  scripts/loki.sh run "$DEV_DIR/loki" 3100 2>"$DEV_DIR/logs/loki.log" &
  pids+=($!)
  wait_for "curl -fs http://127.0.0.1:3100/ready" Loki
  loki_url=http://127.0.0.1:3100
  log "Loki on :3100"
fi
"$DEV_DIR/bin/core-api" serve --database-url "$dsn" --listen "127.0.0.1:$API_PORT" \
  --temporal "127.0.0.1:$TEMPORAL_PORT" ${loki_url:+--loki "$loki_url"} 2>"$DEV_DIR/logs/core-api.log" &
pids+=($!)
wait_for "curl -fs http://127.0.0.1:$API_PORT/healthz" "core API"
log "core API on :$API_PORT"

names=$(seq -s, -f 'node%g' 1 "$NODES")
eval "$("$DEV_DIR/bin/bootstrap" -api "http://127.0.0.1:$API_PORT" -nodes "$names" \
  -node-config-dir "$DEV_DIR/conf" -temporal "127.0.0.1:$TEMPORAL_PORT" -loki "$loki_url")"
chown -R 2001:2001 "$SHARED/www/acme"
scripts/nodes.sh up "$NODES"
for n in ${names//,/ }; do
  scripts/node-install.sh "$n" "$DEV_DIR"/dist/hostcron-node-agent_*.deb "$DEV_DIR/conf/$n.json"
done
log "$NODES nodes up, agents running"

api="http://127.0.0.1:$API_PORT/api/v1"
cat <<MSG

hostcron is running. Tenant "acme" (id $TENANT_ID) has webroot $WEBROOT_ID.

  export KEY=$TENANT_KEY

  # create a cron job that runs every minute
  curl -s -X POST -H "X-API-Key: \$KEY" -H 'Content-Type: application/json' \\
    $api/tenants/$TENANT_ID/cron-jobs \\
    -d '{"webroot_id":"$WEBROOT_ID","schedule":"* * * * *","command":"echo hello from \$(hostname)"}'

  # watch it: status, next run, history
  curl -s -H "X-API-Key: \$KEY" $api/tenants/$TENANT_ID/cron-jobs
  curl -s -H "X-API-Key: \$KEY" $api/cron-jobs/JOB_ID/runs

  # on a node
  NODES_DIR=$NODES_DIR scripts/nodes.sh exec node1 systemctl list-timers 'cron-*'
  NODES_DIR=$NODES_DIR scripts/nodes.sh exec node1 journalctl -u 'cron-*' -f

Logs: $DEV_DIR/logs. Ctrl-C stops everything.
MSG
wait "${pids[@]}"
