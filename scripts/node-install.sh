#!/bin/bash
# node-install.sh NODE DEB CONFIG [DROPIN] — install hostcron into a booted
# node (scripts/nodes.sh) the way a web node gets it: the node-agent Debian
# package (dpkg -i), the tenants' Linux users (same uid and gid on every
# node, as on a real shard), the node config, an optional drop-in for the
# agent's service; then start the agent. `make dev` and the end-to-end
# harness both install nodes with it.
#
# Env: TENANTS="name:uid ..." (default "acme:2001"); NODES_DIR as for nodes.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=$1 deb=$2 config=$3 dropin=${4:-}
root=$("$here/nodes.sh" root "$node")
install -m 0644 "$deb" "$root/var/tmp/hostcron-node-agent.deb"
"$here/nodes.sh" exec "$node" dpkg -i /var/tmp/hostcron-node-agent.deb >/dev/null
for t in ${TENANTS:-acme:2001}; do
  name=${t%%:*} id=${t##*:}
  "$here/nodes.sh" exec "$node" sh -c "getent passwd $name >/dev/null || { groupadd -g $id $name && useradd -u $id -g $id -M -d /srv/shared/www/$name -s /bin/sh $name; }"
done
# The config goes in after the package, whose postinst starts an agent only
# if one exists: the agent starts once, configured, below.
install -D -m 0600 "$config" "$root/etc/hostcron/node.json"
if [ -n "$dropin" ]; then
  install -D -m 0644 "$dropin" "$root/etc/systemd/system/hostcron-node-agent.service.d/local.conf"
fi
"$here/nodes.sh" exec "$node" sh -c 'systemctl daemon-reload && systemctl enable --now hostcron-node-agent.service' >/dev/null
