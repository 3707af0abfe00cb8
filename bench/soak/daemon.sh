#!/usr/bin/env bash
# Runs bench/soak against a daemon of its own, started from BIN (default
# bin/airlock) on DATA_DIR, then stops it: one side of a before/after pair.
#
#   BIN=/tmp/old/airlock DATA_DIR=/var/lib/airlock-x NET_PREFIX=alx SUBNET=10.9.0.0/16 \
#     bash bench/soak/daemon.sh -profile long -duration 5m -json /tmp/old.json
#
# The daemon is the test suite's (scripts/test.sh): warm pool off, so every
# create restores the template's boot snapshot. Its log is $DATA_DIR.soak.log,
# at debug level: bench/soak reads the creates' restore and wait steps from it
# (the "floor: create ..." rows), and the kills' steps (the "kill step: ..." and
# "kill teardown: ..." rows).
# Knobs: BIN, DATA_DIR, NET_PREFIX, SUBNET, LISTEN (default 127.0.0.1:49990),
# SERVE_ARGS (extra serve flags). Other arguments go to bench/soak.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin/airlock}
DATA_DIR=${DATA_DIR:?set DATA_DIR}
NET_PREFIX=${NET_PREFIX:?set NET_PREFIX}
SUBNET=${SUBNET:?set SUBNET}
LISTEN=${LISTEN:-127.0.0.1:49990}
KEY=soak-$RANDOM$RANDOM
LOG=$DATA_DIR.soak.log
# shellcheck disable=SC2086 # SERVE_ARGS is split on purpose
"$BIN" serve --listen "$LISTEN" --data-dir "$DATA_DIR" --api-key "$KEY" --net-prefix "$NET_PREFIX" \
	--subnet "$SUBNET" --warm-pool code-interpreter-v1=0 --log-level debug ${SERVE_ARGS:-} >"$LOG" 2>&1 &
PID=$!
# killall kills every sandbox the daemon lists (leftovers of an earlier run
# that it re-attached, or of this one).
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
# Creates restore the boot snapshot only once it is ready.
for _ in $(seq 1 1200); do
	grep -q 'boot snapshot ready.*template=code-interpreter-v1' "$LOG" && break
	grep -q 'no boot snapshot.*template=code-interpreter-v1' "$LOG" && { echo "no boot snapshot; see $LOG" >&2; exit 1; }
	sleep 1
done
killall
echo "daemon $PID ($BIN) up on $LISTEN"
AIRLOCK_URL=http://$LISTEN AIRLOCK_API_KEY=$KEY go run ./bench/soak -pid "$PID" -daemon-log "$LOG" "$@"
