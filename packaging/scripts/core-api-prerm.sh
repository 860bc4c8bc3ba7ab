#!/bin/sh
set -e
systemctl disable --now hostcron-core-api.service >/dev/null 2>&1 || true
