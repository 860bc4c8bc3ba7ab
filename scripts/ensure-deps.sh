#!/bin/bash
# Install the Debian packages the test tiers need, only where missing.
set -euo pipefail
need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v make >/dev/null || need+=(make)
[ -e /usr/share/zoneinfo/Europe/Berlin ] || need+=(tzdata)
# promtool checks and unit-tests the alert rules (make rules); it comes
# with the prometheus server, which the tests do not want running.
need_prometheus=false
command -v promtool >/dev/null || { need+=(prometheus); need_prometheus=true; }
if [ ${#need[@]} -gt 0 ]; then
  echo "ensure-deps: installing ${need[*]}" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
if $need_prometheus; then
  for unit in prometheus prometheus-node-exporter; do
    systemctl disable --now "$unit" >/dev/null 2>&1 || true
  done
fi
