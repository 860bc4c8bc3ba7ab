#!/bin/sh
set -e
# A dedicated system user: the API needs no privileges.
getent group hostcron >/dev/null || addgroup --system hostcron
getent passwd hostcron >/dev/null || adduser --system --ingroup hostcron --home /nonexistent --no-create-home hostcron
