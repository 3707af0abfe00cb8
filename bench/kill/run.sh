#!/usr/bin/env bash
# Kill latency, before/after in one run (issue 24): for each binary given, a
# daemon of its own on DATA_DIR (the test suite's flags, warm pool off), then
# bench/kill: N idle `base` sandboxes killed one after another, N killed
# PARALLEL at a time, and (CHURN=1, default) the same two rounds again while
# a helper holds the kernel's rtnl lock busy by adding and deleting dummy
# links in a namespace of its own. Each binary's rows are prefixed with its
# path; compare within one run (the host is shared).
#
#   DATA_DIR=/var/lib/airlock-x NET_PREFIX=alx SUBNET=10.94.0.0/16 \
#     bash bench/kill/run.sh /tmp/old/airlock bin/airlock
#
# Knobs: N (20; at most 30 on a shared host), PARALLEL (10), CHURN (1),
# LISTEN (127.0.0.1:49991), SERVE_ARGS. airlock-envd must sit next to each
# binary. The daemon logs are $DATA_DIR.kill.<i>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:?set DATA_DIR}
NET_PREFIX=${NET_PREFIX:?set NET_PREFIX}
SUBNET=${SUBNET:?set SUBNET}
LISTEN=${LISTEN:-127.0.0.1:49991}
N=${N:-20}
PARALLEL=${PARALLEL:-10}
CHURN=${CHURN:-1}
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN…]" >&2; exit 2; }
BENCH=$(mktemp -d)/kill-bench
go build -o "$BENCH" ./bench/kill
PID=
stop() {
	if [ -n "$PID" ]; then
		kill -TERM "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
		PID=
	fi
}
trap stop EXIT
i=0
for BIN in "$@"; do
	i=$((i + 1))
	KEY=kill-$RANDOM$RANDOM
	LOG=$DATA_DIR.kill.$i.log
	# shellcheck disable=SC2086 # SERVE_ARGS is split on purpose
	"$BIN" serve --listen "$LISTEN" --data-dir "$DATA_DIR" --api-key "$KEY" --net-prefix "$NET_PREFIX" \
		--subnet "$SUBNET" --warm-pool code-interpreter-v1=0 ${SERVE_ARGS:-} >"$LOG" 2>&1 &
	PID=$!
	for _ in $(seq 1 1200); do
		curl -fsS "http://$LISTEN/health" >/dev/null 2>&1 && break
		kill -0 "$PID" 2>/dev/null || { echo "daemon exited; see $LOG" >&2; exit 1; }
		sleep 1
	done
	for _ in $(seq 1 600); do
		grep -qE '(boot snapshot ready|no boot snapshot).*template=base' "$LOG" && break
		sleep 1
	done
	echo "# $BIN (daemon $PID, load average $(cut -d' ' -f1-3 /proc/loadavg))"
	AIRLOCK_URL=http://$LISTEN AIRLOCK_API_KEY=$KEY "$BENCH" -label "$BIN" -n "$N" -parallel "$PARALLEL"
	if [ "$CHURN" = 1 ]; then
		AIRLOCK_URL=http://$LISTEN AIRLOCK_API_KEY=$KEY "$BENCH" -label "$BIN" -n "$N" -parallel "$PARALLEL" \
			-churn "kbchurn-${NET_PREFIX}"
	fi
	stop
done
