#!/bin/bash
# node-install.sh NODE BIN_DIR CONFIG — install hostcron into a booted node
# (scripts/nodes.sh): the binaries, the tenant user "acme" (uid 2001 on
# every node, as on a real shard), the node config and the agent service.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=$1 bin=$2 config=$3
root=$("$here/nodes.sh" root "$node")
install -m 0755 "$bin/node-agent" "$bin/cron-run" "$bin/cron-outcome" "$root/usr/local/bin/"
install -D -m 0600 "$config" "$root/etc/hostcron/node.json"
install -D -m 0644 "$here/../packaging/systemd/hostcron-node-agent.service" "$root/etc/systemd/system/hostcron-node-agent.service"
"$here/nodes.sh" exec "$node" sh -c 'getent passwd acme >/dev/null || { groupadd -g 2001 acme && useradd -u 2001 -g 2001 -M -d /srv/shared/www/acme -s /bin/sh acme; }'
"$here/nodes.sh" exec "$node" systemctl enable --now hostcron-node-agent.service >/dev/null 2>&1
