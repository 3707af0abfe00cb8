#!/usr/bin/env bash
# Volume throughput (issue 27): a daemon of its own on DATA_DIR (gVisor), one
# loop volume, then bench/volumes/volumes.mjs: sequential write/read and
# small-file creates in a sandbox on the volume and on its own disk, and the
# same work on the host, in one run (compare within the run: the host is shared).
#
#   DATA_DIR=/var/lib/airlock-x NET_PREFIX=alx SUBNET=10.94.0.0/16 bash bench/volumes/run.sh [BIN]
#
# Knobs: SIZE_MB (256), FILES (1000), ROUNDS (3), LISTEN (127.0.0.1:49992),
# SERVE_ARGS. The daemon log is $DATA_DIR.volumes.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:?set DATA_DIR}
NET_PREFIX=${NET_PREFIX:?set NET_PREFIX}
SUBNET=${SUBNET:?set SUBNET}
LISTEN=${LISTEN:-127.0.0.1:49992}
BIN=${1:-bin/airlock}
[ -d test/e2e/node_modules/e2b ] || (cd test/e2e && npm ci --no-audit --no-fund --loglevel=error)
VOL=benchvol$$
VOL_ID=
HOST_DIR=$DATA_DIR/bench-host-dir
KEY=bench-volumes-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
PID=
stop() {
	[ -n "$VOL_ID" ] && curl -fsS -o /dev/null -X DELETE -H "X-API-Key: $KEY" "http://$LISTEN/volumes/$VOL_ID" || true
	[ -n "$PID" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
	rm -rf "$HOST_DIR"
}
trap stop EXIT
mkdir -p "$HOST_DIR"
# shellcheck disable=SC2086
"$BIN" serve --api-key "$KEY" --data-dir "$DATA_DIR" --listen "$LISTEN" --runtime gvisor \
	--net-prefix "$NET_PREFIX" --subnet "$SUBNET" --templates base --boot-snapshots=false --kill-on-exit \
	${SERVE_ARGS:-} >>"$DATA_DIR.volumes.log" 2>&1 &
PID=$!
for _ in $(seq 600); do curl -fsS -o /dev/null "http://$LISTEN/health" 2>/dev/null && break; sleep 0.5; done
curl -fsS -o /dev/null "http://$LISTEN/health"
# The volume, made through the volume API; its host directory is the loop
# backing's mnt/data (docs/ARCHITECTURE.md, data directory).
VOL_ID=$(curl -fsS -X POST -H "X-API-Key: $KEY" -H 'Content-Type: application/json' \
	-d "{\"name\":\"$VOL\",\"sizeMB\":2048}" "http://$LISTEN/volumes" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).volumeID))')
VOLUME_DIR=$DATA_DIR/volumes/$VOL_ID/mnt/data
E2B_API_URL=http://$LISTEN E2B_API_KEY=$KEY E2B_SANDBOX_URL=http://$LISTEN VOLUME=$VOL VOLUME_DIR=$VOLUME_DIR HOST_DIR=$HOST_DIR \
	node bench/volumes/volumes.mjs
