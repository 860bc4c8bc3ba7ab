#!/bin/sh
set -e
chgrp hostcron /etc/hostcron/core-api.env
systemctl daemon-reload >/dev/null 2>&1 || true
systemctl enable hostcron-core-api.service >/dev/null 2>&1 || true
