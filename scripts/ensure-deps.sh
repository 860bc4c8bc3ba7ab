#!/bin/bash
# Install the Debian packages the test tiers need, only where missing.
set -euo pipefail
need=()
command -v systemd-analyze >/dev/null || need+=(systemd)
command -v make >/dev/null || need+=(make)
[ -e /usr/share/zoneinfo/Europe/Berlin ] || need+=(tzdata)
if [ ${#need[@]} -gt 0 ]; then
  echo "ensure-deps: installing ${need[*]}" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
