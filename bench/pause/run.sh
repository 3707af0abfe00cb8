#!/usr/bin/env bash
# Pause and cross-node resume of an interpreter sandbox in a real cluster
# (scripts/run-cluster.sh: PostgreSQL, 3 nodes, 2 api instances, haproxy; a
# versitygw S3 server as the artifact store, as scripts/test.sh's cluster
# stage runs it), through the official SDK (bench/pause/pause.mjs), for each
# airlock binary given, one after the other in the same run; prints one table.
#
# Usage (root, after scripts/setup.sh; test/cluster's npm packages installed):
#   bench/pause/run.sh [BIN...]     # default: bin/airlock
#   PAUSE_N=10 bench/pause/run.sh /tmp/airlock-main bin/airlock
#
# Environment: PAUSE_N (iterations per binary, default 10), PAUSE_SEED (a data
# dir whose templates/ seed the nodes, default /var/lib/airlock-test),
# AIRLOCK_CLUSTER_STATE (default /var/lib/airlock-bench-pause-cluster) and the
# run-cluster.sh prefixes/subnets knobs (AIRLOCK_CLUSTER_NET_PREFIXES, …) to run
# next to other daemons; PAUSE_NODE_ARGS, more `airlock serve` flags for the
# nodes (`--log-level debug` logs each step's time and the bare `runsc
# restore`, which breakdown.mjs then reports). Each binary needs airlock-envd next to it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
STATE=${AIRLOCK_CLUSTER_STATE:-/var/lib/airlock-bench-pause-cluster}
SEED=${PAUSE_SEED:-/var/lib/airlock-test}
S3DIR=$STATE-s3
BINS=("$@")
[ "${#BINS[@]}" -gt 0 ] || BINS=("$ROOT/bin/airlock")
[ -d test/cluster/node_modules/e2b ] || (cd test/cluster && npm ci --no-audit --no-fund --loglevel=error)

s3pid=""
cleanup() {
	bash scripts/run-cluster.sh down --state "$STATE" --purge >/dev/null 2>&1 || true
	[ -n "$s3pid" ] && kill "$s3pid" 2>/dev/null && wait "$s3pid" 2>/dev/null
	rm -rf "$S3DIR"
}
trap cleanup EXIT

# The S3 server (versitygw, scripts/build-s3-server.sh), as test.sh starts it.
start_s3() {
	local bin port key secret
	bin=/var/cache/airlock/versitygw/$(tr -d ' \n' <internal/artifacts/s3test/versitygw.version)/versitygw
	[ -x "$bin" ] || { echo "bench/pause: $bin missing (scripts/build-s3-server.sh)" >&2; exit 1; }
	rm -rf "$S3DIR" && mkdir -p "$S3DIR/root" && chmod 0700 "$S3DIR"
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
	key=$(od -An -N10 -tx1 /dev/urandom | tr -d ' \n')
	secret=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
	(cd / && exec env ROOT_ACCESS_KEY_ID="$key" ROOT_SECRET_ACCESS_KEY="$secret" "$bin" --port "127.0.0.1:$port" --region us-east-1 --quiet posix "$S3DIR/root" </dev/null >>"$S3DIR/server.log" 2>&1) &
	s3pid=$!
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
	curl -fsS -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" \
		-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "http://127.0.0.1:$port/airlock-bench"
	export AIRLOCK_S3_ENDPOINT=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=$key AWS_SECRET_ACCESS_KEY=$secret AWS_REGION=us-east-1
}

out=$(mktemp -d /tmp/bench-pause.XXXXXX)
for bin in "${BINS[@]}"; do
	bin=$(readlink -f "$bin")
	[ -x "$(dirname "$bin")/airlock-envd" ] || { echo "bench/pause: no airlock-envd next to $bin" >&2; exit 1; }
	start_s3
	AIRLOCK_CLUSTER_BIN=$bin bash scripts/run-cluster.sh up --state "$STATE" --seed-templates "$SEED" \
		--artifacts s3://airlock-bench/pause --node-args "--boot-snapshots=false --node-cpus 32 ${PAUSE_NODE_ARGS:-}" >"$out/up.log" 2>&1 ||
		{ tail -n 30 "$out/up.log"; exit 1; }
	(cd test/cluster && AIRLOCK_CLUSTER_STATE=$STATE PAUSE_LABEL=$bin node "$ROOT/bench/pause/pause.mjs") | tee -a "$out/rows"
	logs="$out/logs-$(basename "$(dirname "$bin")")-$(basename "$bin")"
	cp -r "$STATE/logs" "$logs" 2>/dev/null || true
	node bench/pause/breakdown.mjs "$logs" "$bin" >>"$out/steps" || true
	bash scripts/run-cluster.sh down --state "$STATE" --purge >/dev/null 2>&1
	kill "$s3pid" 2>/dev/null; wait "$s3pid" 2>/dev/null; s3pid=""
done
echo
echo "| binary | n | pause p50 | pause p99 | resume on another node p50 | p99 | pause→resume elsewhere at once p50 | p99 | same-node resume p50 | p99 | load avg |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
grep '^|' "$out/rows" | grep -v '^| binary' || true
echo
echo "The nodes' own timings, p50/p99 (node logs):"
cat "$out/steps" 2>/dev/null
echo "(logs: $out)"
