#!/bin/bash
# node-install.sh NODE DEB CONFIG — install hostcron into a booted node
# (scripts/nodes.sh) the way a web node gets it: the node-agent Debian
# package, the tenant user "acme" (uid 2001 on every node, as on a real
# shard), the node config; then start the agent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=$1 deb=$2 config=$3
root=$("$here/nodes.sh" root "$node")
install -m 0644 "$deb" "$root/var/tmp/hostcron-node-agent.deb"
"$here/nodes.sh" exec "$node" dpkg -i /var/tmp/hostcron-node-agent.deb >/dev/null
install -D -m 0600 "$config" "$root/etc/hostcron/node.json"
"$here/nodes.sh" exec "$node" sh -c 'getent passwd acme >/dev/null || { groupadd -g 2001 acme && useradd -u 2001 -g 2001 -M -d /srv/shared/www/acme -s /bin/sh acme; }'
"$here/nodes.sh" exec "$node" systemctl enable --now hostcron-node-agent.service >/dev/null 2>&1
