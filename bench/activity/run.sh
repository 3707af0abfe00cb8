#!/usr/bin/env bash
# Activity feed overhead (issue 28): two daemons of its own (gVisor), one with
# the feed off and one with it on, a network namespace standing in for a
# host that resets connections, then bench/activity/activity.mjs (off / on
# with nobody listening / on with one SSE listener, interleaved in one run).
#
#   DATA_DIR=/var/lib/airlock-x NET_PREFIX=alx SUBNET=10.94.0.0/16 EXT=10.78.250 bash bench/activity/run.sh [BIN]
#
# DATA_DIR must hold templates/ (cp -al of a warm data dir's); the two
# daemons use DATA_DIR.off and DATA_DIR.on (templates hard-linked from it)
# and the /17 halves of SUBNET; EXT's .40/29 is the stand-in host (.41 on
# the host side, .42 the target). Knobs: ROUNDS, RT_N, HEAVY_N, FLOOR, WORK (activity.mjs);
# CPU=1 then also runs bench/activity/cpu.mjs (CPU per files run by component, CPU_N runs;
# CPU=only runs it alone); PROFILE=1 runs bench/activity/profile.mjs alone (where a files
# run's cost goes with a listener: CPU per host process, bytes, entries; PROF_N runs a phase,
# PERF_DIR for `perf record -g` of those processes per phase). OFF_PORT and ON_PORT are the daemons' ports
# (default: free ones).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:?set DATA_DIR}
NET_PREFIX=${NET_PREFIX:?set NET_PREFIX}
SUBNET=${SUBNET:?set SUBNET}
EXT=${EXT:?set EXT}
BIN=${1:-bin/airlock}
[ -d test/e2e/node_modules/e2b ] || (cd test/e2e && npm ci --no-audit --no-fund --loglevel=error)
KEY=bench-activity-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
NS=${NET_PREFIX}-actns
HOSTIF=${NET_PREFIX}xa
NSIF=${NET_PREFIX}xb
base=${SUBNET%/*}
IFS=. read -r a b _ _ <<<"$base"
PIDS=()
stop() {
	for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
	ip link del "$HOSTIF" 2>/dev/null || true
	ip netns del "$NS" 2>/dev/null || true
}
trap stop EXIT
ip netns add "$NS"
ip link add "$HOSTIF" type veth peer name "$NSIF"
ip link set "$NSIF" netns "$NS"
ip addr add "$EXT.41/29" dev "$HOSTIF"
ip link set "$HOSTIF" up
ip -n "$NS" addr add "$EXT.42/29" dev "$NSIF"
ip -n "$NS" link set "$NSIF" up
ip -n "$NS" route add default via "$EXT.41"
start() { # name port max-entries subnet
	mkdir -p "$DATA_DIR.$1"
	[ -d "$DATA_DIR.$1/templates" ] || cp -al "$DATA_DIR/templates" "$DATA_DIR.$1/"
	"$BIN" serve --api-key "$KEY" --data-dir "$DATA_DIR.$1" --listen "127.0.0.1:$2" --runtime gvisor \
		--net-prefix "${NET_PREFIX}$1" --subnet "$4" --templates base --boot-snapshots=false --kill-on-exit \
		--deny-out-except "$EXT.40/29" --activity-max-entries "$3" >>"$DATA_DIR.$1.log" 2>&1 &
	PIDS+=($!)
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
OFF_PORT=${OFF_PORT:-$(free_port)}
ON_PORT=${ON_PORT:-$(free_port)}
while [ "$ON_PORT" = "$OFF_PORT" ]; do ON_PORT=$(free_port); done
start off "$OFF_PORT" 0 "$a.$b.0.0/17"
start on "$ON_PORT" 5000 "$a.$b.128.0/17"
for port in "$OFF_PORT" "$ON_PORT"; do
	for _ in $(seq 600); do curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break; sleep 0.5; done
	curl -fsS -o /dev/null "http://127.0.0.1:$port/health"
done
if [ -n "${PROFILE:-}" ]; then
	ON_URL=http://127.0.0.1:$ON_PORT API_KEY=$KEY DPID=${PIDS[1]} NET_PREFIX=${NET_PREFIX}on node bench/activity/profile.mjs
	exit 0
fi
if [ "${CPU:-}" != only ]; then
	OFF_URL=http://127.0.0.1:$OFF_PORT ON_URL=http://127.0.0.1:$ON_PORT API_KEY=$KEY TARGET=$EXT.42:9 node bench/activity/activity.mjs
fi
if [ -n "${CPU:-}" ]; then
	ON_URL=http://127.0.0.1:$ON_PORT API_KEY=$KEY DPID=${PIDS[1]} node bench/activity/cpu.mjs
fi
