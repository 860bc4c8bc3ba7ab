#!/bin/sh
set -e
# Cron units stay: a reinstall must not stop tenants' jobs.
systemctl disable --now hostcron-node-agent.service >/dev/null 2>&1 || true
