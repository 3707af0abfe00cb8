#!/usr/bin/env bash
# The image stage of scripts/test.sh: builds the OCI image with
# scripts/build-image.sh and runs it as OCI bundles with Debian's runc (crun
# refuses hosts with hybrid cgroups, as these: AIRLOCK_IMAGE_RUNTIME=crun elsewhere),
# the way the Helm chart runs it:
#   - `--role api` (the host's network) answers GET /health;
#   - `--role node` (privileged, the host's network and /dev, as the chart's
#     DaemonSet) registers with a throwaway PostgreSQL, the api tier lists it,
#     and a sandbox created through the api tier runs a command on it.
# Needs root and a built base template to seed the node with (DATA_DIR, or
# it builds one: minutes).
#
#   scripts/test-image.sh [--data-dir DATA_DIR]
#
# Knobs: AIRLOCK_IMAGE_NET_PREFIX (default alimg), AIRLOCK_IMAGE_SUBNET (default
# 10.76.0.0/24), AIRLOCK_TEST_WORK (scratch parent; default a new /tmp dir),
# AIRLOCK_IMAGE_ARCHIVE (run this already built archive instead of building one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
log() { printf '==> image-test: %s\n' "$*"; }
die() { printf 'test-image: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root"

SEED=""
while [ $# -gt 0 ]; do
	case $1 in
	--data-dir) SEED=${2:?}; shift 2 ;;
	*) die "unknown argument $1" ;;
	esac
done
RT=${AIRLOCK_IMAGE_RUNTIME:-runc}
if ! command -v "$RT" >/dev/null 2>&1; then
	log "installing $RT (Debian)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$RT" >/dev/null ||
		{ DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$RT" >/dev/null; } || die "installing $RT failed"
fi
PREFIX=${AIRLOCK_IMAGE_NET_PREFIX:-alimg}
SUBNET=${AIRLOCK_IMAGE_SUBNET:-10.76.0.0/24}
PG_BIN=/usr/lib/postgresql/15/bin
[ -x "$PG_BIN/initdb" ] || die "PostgreSQL 15 missing (apt-get install postgresql)"
W=$(mktemp -d "${AIRLOCK_TEST_WORK:-/tmp}/airlock-image-test.XXXXXX")
chmod 0711 "$W"
IDS=("$PREFIX-api" "$PREFIX-node")
pgdir=""
cleanup() {
	local id
	for id in "${IDS[@]}"; do
		"$RT" kill "$id" TERM >/dev/null 2>&1 || true
	done
	for id in "${IDS[@]}"; do
		for _ in $(seq 60); do
			"$RT" state "$id" 2>/dev/null | grep -q '"status": *"running"' || break
			sleep 0.5
		done
		"$RT" delete -f "$id" >/dev/null 2>&1 || true
	done
	[ -n "$pgdir" ] && runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$pgdir/data" -m immediate -w -t 30 stop >/dev/null 2>&1
	nft delete table inet "$PREFIX" 2>/dev/null || true
	rm -rf "$W/bundles" "$W/node-data" "$W/api-data" "$W/api-secret" "$pgdir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
since() { echo "$(($(date +%s) - $1)) s"; }

# ---- the image
t0=$(date +%s)
if [ -n "${AIRLOCK_IMAGE_ARCHIVE:-}" ]; then
	out=$AIRLOCK_IMAGE_ARCHIVE
	log "using the image $out"
else
	out=$W/airlock.oci.tar
	bash scripts/build-image.sh "$out" 2>&1 | sed 's/^/  /'
	[ "${PIPESTATUS[0]}" -eq 0 ] || die "scripts/build-image.sh failed"
	log "image built in $(since "$t0") ($(du -h "$out" | cut -f1))"
fi

# ---- bundles: one rootfs, two configs
t=$(date +%s)
go build -o "$W/mkimage" ./deploy/image/mkimage
secret=$W/secret
mkdir -p "$secret" && chmod 0700 "$secret"
(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$secret/cluster-secret")
airlock=$W/bundles/api/rootfs/usr/local/bin/airlock
api_port=$(free_port)
node_port=$(free_port)
api_key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p "$W/bundles/api" "$W/bundles/node" "$W/api-data" "$W/node-data"

# PostgreSQL (throwaway, trust on loopback).
pgdir=$(mktemp -d /tmp/airlock-image-pg.XXXXXX)
chown postgres: "$pgdir" && chmod 0700 "$pgdir"
runuser -u postgres -- "$PG_BIN/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-locale -E UTF8 --no-sync >"$W/initdb.log" 2>&1 ||
	die "initdb failed: $(tail -n 5 "$W/initdb.log")"
pg_port=$(free_port)
printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\nfsync = off\n" "$pg_port" "$pgdir" >>"$pgdir/data/postgresql.conf"
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$pgdir/data" -l "$pgdir/postgres.log" -w -t 60 start >/dev/null ||
	die "PostgreSQL did not start"
runuser -u postgres -- "$PG_BIN/psql" -h "$pgdir" -p "$pg_port" -U postgres -d postgres -qc "CREATE DATABASE airlock" ||
	die "creating the database failed"
store="postgres://postgres@127.0.0.1:$pg_port/airlock?sslmode=disable"

# The api bundle unpacks the image; the node's shares its rootfs. The api
# tier runs as the chart runs it: uid 65532, no capabilities, a read-only
# root, a scratch data dir (but on the host's network here, to reach it).
chown 65532:65532 "$W/api-data"
mkdir -p "$W/api-secret" && cp "$secret/cluster-secret" "$W/api-secret/" && chown -R 65532:65532 "$W/api-secret"
"$W/mkimage" bundle -archive "$out" -dir "$W/bundles/api" -user 65532:65532 -drop-caps -readonly \
	-bind "$W/api-data:/var/lib/airlock" -bind "$W/api-secret:/etc/airlock/cluster:ro" -bind "$W/tls/api:/etc/airlock/cluster-tls:ro" \
	-env "AIRLOCK_STORE=$store" -env "AIRLOCK_API_KEY=$api_key" -- \
	serve --role api --listen "127.0.0.1:$api_port" --data-dir /var/lib/airlock --net-prefix "${PREFIX}a" \
	--cluster-secret-file /etc/airlock/cluster/cluster-secret --cluster-tls-dir /etc/airlock/cluster-tls
# Cluster TLS, made with the image's own airlock (a static binary).
"$airlock" cluster ca init --dir "$W/tls/ca" >/dev/null
"$airlock" cluster cert --ca "$W/tls/ca" --api --out "$W/tls/api" >/dev/null
chown -R 65532:65532 "$W/tls/api"
"$airlock" cluster cert --ca "$W/tls/ca" --node img1 --addr "127.0.0.1:$node_port" --out "$W/tls/img1" >/dev/null
"$W/mkimage" bundle -archive "$out" -dir "$W/bundles/node" -rootfs "$W/bundles/api/rootfs" -privileged \
	-bind "$W/node-data:/var/lib/airlock" -bind "$secret:/etc/airlock/cluster:ro" -bind "$W/tls/img1:/etc/airlock/cluster-tls:ro" \
	-env "AIRLOCK_STORE=$store" -- \
	serve --role node --node-id img1 --listen "127.0.0.1:$node_port" --advertise-addr "127.0.0.1:$node_port" \
	--data-dir /var/lib/airlock --net-prefix "$PREFIX" --subnet "$SUBNET" --templates base --boot-snapshots=false \
	--cluster-secret-file /etc/airlock/cluster/cluster-secret --cluster-tls-dir /etc/airlock/cluster-tls --kill-on-exit
if [ -n "$SEED" ]; then
	# The base template, hard-linked from the suite's data dir (as run-cluster.sh --seed-templates).
	mkdir -p "$W/node-data/templates"
	for m in "$SEED"/templates/*/meta.json; do
		[ -f "$m" ] && grep -q '"name": *"base"' "$m" || continue
		d=$(dirname "$m")
		cp -al "$d" "$W/node-data/templates/$(basename "$d")"
	done
fi
log "bundles and PostgreSQL ready in $(since "$t")"

# ---- api
t=$(date +%s)
(cd "$W/bundles/api" && exec "$RT" run --bundle . "$PREFIX-api") </dev/null >"$W/api.log" 2>&1 &
ok=0
for _ in $(seq 120); do
	if body=$(curl -fsS -m 2 "http://127.0.0.1:$api_port/health" 2>/dev/null); then ok=1; break; fi
	sleep 0.5
done
[ "$ok" = 1 ] || { tail -n 30 "$W/api.log"; die "--role api did not answer /health"; }
log "--role api answers /health in $(since "$t"): $body"

# ---- node
t=$(date +%s)
(cd "$W/bundles/node" && exec "$RT" run --bundle . "$PREFIX-node") </dev/null >"$W/node.log" 2>&1 &
node_runner=$!
export E2B_API_URL=http://127.0.0.1:$api_port E2B_API_KEY=$api_key
ok=0
for _ in $(seq 300); do
	if "$airlock" node ls 2>/dev/null | grep -E '^img1[[:space:]]' | grep -qw live; then ok=1; break; fi
	kill -0 "$node_runner" 2>/dev/null || break # the node exited
	sleep 1
done
if [ "$ok" != 1 ]; then
	"$airlock" node ls 2>&1 | head -n 5 || true
	tail -n 40 "$W/node.log"
	die "--role node did not register as live"
fi
log "--role node registered in $(since "$t"):"
"$airlock" node ls | sed 's/^/  /'
t=$(date +%s)
id=$("$airlock" sandbox create --template base --timeout 120 2>"$W/create.err" | tail -n 1 | awk '{print $1}') ||
	{ cat "$W/create.err"; tail -n 40 "$W/node.log"; die "creating a sandbox through the api tier failed"; }
[ -n "$id" ] || { cat "$W/create.err"; tail -n 40 "$W/node.log"; die "no sandbox id"; }
got=$("$airlock" exec "$id" -- cat /etc/debian_version 2>&1) || { echo "$got"; tail -n 40 "$W/node.log"; die "running a command in sandbox $id failed"; }
log "sandbox $id on the node ran 'cat /etc/debian_version': $got ($(since "$t"))"
"$airlock" sandbox kill "$id" >/dev/null 2>&1 || true
log "image stage passed in $(since "$t0")"
