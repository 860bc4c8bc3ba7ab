#!/bin/bash
# loki.sh — a real Loki for `make dev LOKI=1` and the end-to-end tier.
#
#   loki.sh build            build Loki (devtools/loki, pinned) into the cache, once
#   loki.sh path             print the cached binary's path
#   loki.sh run DIR [PORT [ADDR]]   run it in the foreground, storing under DIR,
#                            listening on ADDR (default 127.0.0.1)
#
# The first build takes about ten minutes; afterwards it is cached in
# $HOSTCRON_CACHE (default /var/cache/hostcron).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${HOSTCRON_CACHE:-/var/cache/hostcron}
version=$(awk '$1=="github.com/grafana/loki/v3"{print $2; exit}' "$here/../devtools/loki/go.mod")
bin=$CACHE/loki-$version

case ${1:-} in
  build)
    [ -x "$bin" ] && exit 0
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.loki-build.lock"; flock 9   # one build at a time
    [ -x "$bin" ] && exit 0
    echo "[loki] building Loki $version (once; about ten minutes)" >&2
    (cd "$here/../devtools/loki" && go build -o "$bin.tmp" github.com/grafana/loki/v3/cmd/loki)
    mv "$bin.tmp" "$bin" ;;
  path) echo "$bin" ;;
  run)
    dir=${2:?usage: loki.sh run DIR [PORT [ADDR]]} port=${3:-3100} addr=${4:-127.0.0.1}
    mkdir -p "$dir"
    cat >"$dir/loki.yaml" <<YAML
auth_enabled: false
server:
  http_listen_address: $addr
  http_listen_port: $port
  grpc_listen_address: $addr
  grpc_listen_port: 0
  log_level: warn
common:
  instance_addr: $addr
  path_prefix: $dir
  replication_factor: 1
  ring:
    kvstore:
      store: inmemory
  storage:
    filesystem:
      chunks_directory: $dir/chunks
      rules_directory: $dir/rules
schema_config:
  configs:
    - from: 2024-01-01
      store: tsdb
      object_store: filesystem
      schema: v13
      index:
        prefix: index_
        period: 24h
limits_config:
  reject_old_samples: false
  allow_structured_metadata: true   # cron_job_id travels as structured metadata
ingester:
  chunk_idle_period: 1m
query_range:
  results_cache:
    cache:
      embedded_cache:
        enabled: false
analytics:
  reporting_enabled: false
YAML
    exec "$bin" -config.file="$dir/loki.yaml" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
esac
