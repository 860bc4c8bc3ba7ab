#!/bin/bash
# keys.sh DIR NODE... — the payload keys of internal/trust, idempotently:
#   DIR/payload.aes            shared AES-256 key (64 hex digits): core and every node
#   DIR/core-sign.key, .pub       the core's Ed25519 signing key; the .pub goes to every node
#   DIR/node-NAME-sign.key, .pub  one per node; the .key stays on that node, the core gets every .pub
# (names do not collide with scripts/certs.sh's, so both may share DIR)
# Existing files are kept, so running it again only adds new nodes. Rotate
# by moving a file away and running it again (see docs/semantics.md).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [NODE...]" >&2; exit 2; }
dir=$1; shift
mkdir -p "$dir"
umask 077

if [ ! -s "$dir/payload.aes" ]; then
	openssl rand -hex 32 >"$dir/payload.aes.tmp" && mv "$dir/payload.aes.tmp" "$dir/payload.aes"
fi

ed25519() { # NAME: NAME-sign.key (PKCS#8 PEM) and NAME-sign.pub (PKIX PEM)
	local k=$dir/$1-sign.key p=$dir/$1-sign.pub
	if [ ! -s "$k" ]; then
		openssl genpkey -algorithm ed25519 -out "$k.tmp" && mv "$k.tmp" "$k"
	fi
	if [ ! -s "$p" ]; then
		openssl pkey -in "$k" -pubout -out "$p.tmp" && mv "$p.tmp" "$p"
		chmod 0644 "$p"
	fi
}

ed25519 core
for n in "$@"; do
	[[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || { echo "bad node name: $n" >&2; exit 2; }
	ed25519 "node-$n"
done
