#!/usr/bin/env bash
# Runs bench/seqcreate against a daemon of its own, started from BIN (default
# bin/airlock) on DATA_DIR, then stops it: one side of a before/after pair.
#
#   BIN=/tmp/old/airlock DATA_DIR=/var/lib/airlock-x NET_PREFIX=alx SUBNET=10.9.0.0/16 \
#     bash bench/seqcreate/daemon.sh -n 24 -m 30
#
# The daemon has the default warm pool (automatic for code-interpreter-v1;
# SERVE_ARGS='--warm-pool code-interpreter-v1=0' turns it off). Its log is
# $DATA_DIR.seqcreate.log, at debug level: the bench reads the pool hits and
# the creates' step times from it.
# Knobs: BIN, DATA_DIR, NET_PREFIX, SUBNET, LISTEN (default 127.0.0.1:49991),
# SERVE_ARGS (extra serve flags). Other arguments go to bench/seqcreate.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin/airlock}
DATA_DIR=${DATA_DIR:?set DATA_DIR}
NET_PREFIX=${NET_PREFIX:?set NET_PREFIX}
SUBNET=${SUBNET:?set SUBNET}
LISTEN=${LISTEN:-127.0.0.1:49991}
KEY=seq-$RANDOM$RANDOM
LOG=$DATA_DIR.seqcreate.log
# shellcheck disable=SC2086 # SERVE_ARGS is split on purpose
"$BIN" serve --listen "$LISTEN" --data-dir "$DATA_DIR" --api-key "$KEY" --net-prefix "$NET_PREFIX" \
	--subnet "$SUBNET" --log-level debug ${SERVE_ARGS:-} >"$LOG" 2>&1 &
PID=$!
killall() {
	local id
	for id in $(curl -fsS -H "X-API-Key: $KEY" "http://$LISTEN/sandboxes" 2>/dev/null | grep -oE '"sandboxID":"[^"]+"' | cut -d'"' -f4); do
		curl -fsS -o /dev/null -X DELETE -H "X-API-Key: $KEY" "http://$LISTEN/sandboxes/$id" || true
	done
}
stop() {
	killall
	kill -TERM "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
}
trap stop EXIT
for _ in $(seq 1 1200); do
	curl -fsS "http://$LISTEN/health" >/dev/null 2>&1 && break
	kill -0 "$PID" 2>/dev/null || { echo "daemon exited; see $LOG" >&2; exit 1; }
	sleep 1
done
for _ in $(seq 1 1200); do
	grep -q 'boot snapshot ready.*template=code-interpreter-v1' "$LOG" && break
	grep -q 'no boot snapshot.*template=code-interpreter-v1' "$LOG" && { echo "no boot snapshot; see $LOG" >&2; exit 1; }
	sleep 1
done
killall
sleep "${WARMUP:-10}" # the automatic pool fills its first sandbox
echo "daemon $PID ($BIN) up on $LISTEN"
AIRLOCK_URL=http://$LISTEN AIRLOCK_API_KEY=$KEY go run ./bench/seqcreate -daemon-log "$LOG" "$@"
