#!/bin/bash
# certs.sh DIR NODE... — a dev/test CA and the certificates for mutual TLS
# to the Temporal frontend, idempotently (existing files are kept):
#   DIR/ca.crt, ca.key           the CA (10 years)
#   DIR/temporal.crt, .key       the frontend: SAN 127.0.0.1, ::1, localhost
#                                and $TEMPORAL_EXTRA_SAN (e.g. IP:10.0.10.5);
#                                also a client certificate, since the
#                                embedded server's system worker presents it
#   DIR/core.crt, .key           the core's client certificate (CN core-api)
#   DIR/node-NAME.crt, .key      one client certificate per node (CN NAME)
# (names do not collide with scripts/keys.sh's, so both may share DIR)
# Use: devtools/temporal --tls-cert DIR/temporal.crt --tls-key DIR/temporal.key --tls-ca DIR/ca.crt
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [NODE...]" >&2; exit 2; }
dir=$1; shift
mkdir -p "$dir"
umask 077

if [ ! -s "$dir/ca.crt" ]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=hostcron dev CA" -keyout "$dir/ca.key" -out "$dir/ca.crt.tmp" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	mv "$dir/ca.crt.tmp" "$dir/ca.crt"
	chmod 0644 "$dir/ca.crt"
fi

issue() { # NAME CN EXTKEYUSAGE [SAN]
	local name=$1 cn=$2 eku=$3 san=${4:-} ext
	[ -s "$dir/$name.crt" ] && return 0
	ext=$(mktemp)
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature"
		echo "extendedKeyUsage=$eku"
		[ -z "$san" ] || echo "subjectAltName=$san"
	} >"$ext"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
		-keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
	openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
		-days 825 -extfile "$ext" -out "$dir/$name.crt.tmp" 2>/dev/null
	rm -f "$ext" "$dir/$name.csr"
	mv "$dir/$name.crt.tmp" "$dir/$name.crt"
	chmod 0644 "$dir/$name.crt"
}

issue temporal localhost serverAuth,clientAuth "IP:127.0.0.1,IP:::1,DNS:localhost${TEMPORAL_EXTRA_SAN:+,$TEMPORAL_EXTRA_SAN}"
issue core core-api clientAuth
for n in "$@"; do
	[[ $n =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || { echo "bad node name: $n" >&2; exit 2; }
	issue "node-$n" "$n" clientAuth
done
