#!/bin/sh
set -e
systemctl daemon-reload >/dev/null 2>&1 || true
# Start the agent once it is configured; an unconfigured agent would only fail.
if [ -f /etc/hostcron/node.json ]; then
  systemctl enable hostcron-node-agent.service >/dev/null 2>&1 || true
  systemctl restart hostcron-node-agent.service >/dev/null 2>&1 || true
fi
