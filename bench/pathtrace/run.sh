#!/usr/bin/env bash
# How far one request travels through the source, for four paths: a create from
# a boot snapshot, an exec, a cluster create, and a pause on node A with the
# resume on node B. For each, entry uprobes on every function of the project's
# packages in the airlock binary record the functions one request runs; the
# helper (bench/pathtrace) maps them to files and prints files crossed and
# "returns" (entries into a file the path had already left), then
# sandbox.Manager / sandbox.Live method counts and lines per package.
#
# Usage (root; the repo's templates already built somewhere to seed from):
#   bench/pathtrace/run.sh [REPO]          # REPO: any checkout (default: this one)
#
# REPO's cmd/airlock is built with inlining off for the project's packages (so
# small functions show up as calls) into $PATHTRACE_WORK/bin; the helper is
# built from this script's own tree, so an older or newer REPO is measured with
# the same tool. A single daemon (create, exec) and then REPO's
# scripts/run-cluster.sh with a versitygw S3 store (cluster create,
# pause-resume) run that binary; everything is torn down at the end.
#
# Environment (defaults in brackets):
#   PATHTRACE_PATHS         which paths [create exec cluster-create pause-resume]
#   PATHTRACE_WORK          work dir: binaries, probes.json, results, logs [/var/tmp/pathtrace]
#   PATHTRACE_SEED          data dir whose templates/ seed the daemons [/var/lib/airlock-test]
#   PATHTRACE_DATA_DIR      the single daemon's data dir [/var/lib/airlock-pathtrace]
#   PATHTRACE_NET_PREFIX / PATHTRACE_SUBNET   the single daemon's [hpd / 10.85.0.0/16]
#   PATHTRACE_TYPES         whose methods to count, DIR.Type,…
#                           [internal/sandbox.Manager,internal/sandbox.Live]
#   AIRLOCK_CLUSTER_STATE, AIRLOCK_CLUSTER_NET_PREFIXES, AIRLOCK_CLUSTER_SUBNETS,
#   AIRLOCK_CLUSTER_API_NET_PREFIXES   passed to run-cluster.sh
#                           [/var/lib/airlock-pathtrace-cluster, "hpc1 hpc2 hpc3",
#                            "10.94.0.0/18 10.94.64.0/18 10.94.128.0/18", "hpq1 hpq2"]
# Output: the tables on stdout; WORK/results/<path>.path.txt has each kept
# goroutine's file transitions (the path, readable), WORK/results/<path>.json the row.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOL_ROOT=$(cd "$HERE/../.." && pwd)
REPO=$(cd "${1:-$TOOL_ROOT}" && pwd)
WORK=${PATHTRACE_WORK:-/var/tmp/pathtrace}
SEED=${PATHTRACE_SEED:-/var/lib/airlock-test}
DATA=${PATHTRACE_DATA_DIR:-/var/lib/airlock-pathtrace}
PFX=${PATHTRACE_NET_PREFIX:-hpd}
SUBNET=${PATHTRACE_SUBNET:-10.85.0.0/16}
read -r -a PATHS <<<"${PATHTRACE_PATHS:-create exec cluster-create pause-resume}"
export AIRLOCK_CLUSTER_STATE=${AIRLOCK_CLUSTER_STATE:-/var/lib/airlock-pathtrace-cluster}
export AIRLOCK_CLUSTER_NET_PREFIXES=${AIRLOCK_CLUSTER_NET_PREFIXES:-hpc1 hpc2 hpc3}
export AIRLOCK_CLUSTER_SUBNETS=${AIRLOCK_CLUSTER_SUBNETS:-10.94.0.0/18 10.94.64.0/18 10.94.128.0/18}
export AIRLOCK_CLUSTER_API_NET_PREFIXES=${AIRLOCK_CLUSTER_API_NET_PREFIXES:-hpq1 hpq2}
export GOFLAGS=${GOFLAGS:--mod=mod}
[ "$(id -u)" = 0 ] || { echo "bench/pathtrace: needs root (uprobes, daemons)" >&2; exit 1; }

BIN=$WORK/bin/airlock
RES=$WORK/results
PT=$WORK/pathtrace
mkdir -p "$WORK/bin" "$RES" "$WORK/logs"
rm -f "$RES"/*
log() { printf '==> %s\n' "$*" >&2; }

dpid="" s3pid="" cluster=0
stop_daemon() {
	if [ -n "$dpid" ]; then kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true; fi
	dpid=""
	# A stopped daemon leaves its firewall table (a restart reattaches).
	nft delete table inet "$PFX" 2>/dev/null || true
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PFX-" || true); do ip netns delete "$ns" || true; done
}
cleanup() {
	stop_daemon
	if [ "$cluster" = 1 ]; then (cd "$REPO" && bash scripts/run-cluster.sh down --state "$AIRLOCK_CLUSTER_STATE" --purge >/dev/null 2>&1) || true; fi
	if [ -n "$s3pid" ]; then kill "$s3pid" 2>/dev/null && wait "$s3pid" 2>/dev/null || true; fi
	rm -rf "$WORK/s3"
	# Last: the kernel disables each probe with its own RCU grace period, which
	# takes from seconds on an idle host to minutes on a loaded one.
	if [ -x "$PT" ]; then
		log "removing the uprobes"
		"$PT" unprobe || true
	fi
}
trap cleanup EXIT

log "building $REPO (inlining off for the project's packages) and the helper"
(cd "$REPO" && go build -gcflags='github.com/airlock-sandbox/airlock/...=-l' -o "$BIN" ./cmd/airlock &&
	CGO_ENABLED=0 go build -o "$WORK/bin/airlock-envd" ./cmd/airlock-envd)
(cd "$TOOL_ROOT" && go build -o "$PT" ./bench/pathtrace)
echo "repo $REPO at $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$REPO" status --porcelain 2>/dev/null | grep -q . && echo ' (uncommitted changes)')" >"$RES/repo"
"$PT" probe -bin "$BIN" -repo "$REPO" -state "$RES"

want() { local p; for p in "${PATHS[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

if want create || want exec; then
	if [ ! -d "$DATA/templates" ]; then
		mkdir -p "$DATA" && cp -al "$SEED/templates" "$DATA/"
	fi
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
	key="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
	dlog=$WORK/logs/daemon.log
	: >"$dlog"
	log "single daemon on 127.0.0.1:$port (data dir $DATA, log $dlog)"
	# --warm-pool code-interpreter-v1=0: every create of it restores its boot
	# snapshot (with a pool, a create would be a claim).
	"$BIN" serve --listen "127.0.0.1:$port" --data-dir "$DATA" --api-key "$key" --net-prefix "$PFX" --subnet "$SUBNET" \
		--warm-pool code-interpreter-v1=0 </dev/null >>"$dlog" 2>&1 &
	dpid=$!
	for _ in $(seq 600); do
		body=$(curl -fsS -m 2 "http://127.0.0.1:$port/health" 2>/dev/null) && ! grep -q '"building"' <<<"$body" && break
		kill -0 "$dpid" 2>/dev/null || { tail -n 20 "$dlog" >&2; exit 1; }
		sleep 1
	done
	sleep 5 # let start-up work (template checks, GC) settle
	if want create; then
		before=$(grep -ci 'boot snapshot' "$dlog" || true)
		"$PT" run -state "$RES" -path create -url "http://127.0.0.1:$port" -key "$key" -template code-interpreter-v1 \
			-label "code-interpreter-v1, from its boot snapshot (--warm-pool 0)"
		[ "$(grep -ci 'boot snapshot' "$dlog" || true)" -gt "$before" ] || echo "bench/pathtrace: warning: the daemon log names no boot snapshot after the create: was it a restore from one?" >&2
	fi
	if want exec; then
		"$PT" run -state "$RES" -path exec -url "http://127.0.0.1:$port" -key "$key" -template base \
			-label 'process.Start of `bash -l -c true` in a running base sandbox, through the daemon'
	fi
	stop_daemon
fi

if want cluster-create || want pause-resume; then
	# A versitygw S3 server as the artifact store, as scripts/test.sh starts it.
	vbin=/var/cache/airlock/versitygw/$(tr -d ' \n' <"$REPO/internal/artifacts/s3test/versitygw.version")/versitygw
	[ -x "$vbin" ] || { echo "bench/pathtrace: $vbin missing (scripts/build-s3-server.sh)" >&2; exit 1; }
	rm -rf "$WORK/s3" && mkdir -p "$WORK/s3/root" && chmod 0700 "$WORK/s3"
	sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
	skey=$(od -An -N10 -tx1 /dev/urandom | tr -d ' \n')
	ssecret=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
	(cd / && exec env ROOT_ACCESS_KEY_ID="$skey" ROOT_SECRET_ACCESS_KEY="$ssecret" "$vbin" --port "127.0.0.1:$sport" \
		--region us-east-1 --quiet posix "$WORK/s3/root" </dev/null >>"$WORK/logs/s3.log" 2>&1) &
	s3pid=$!
	for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$sport/" && break; sleep 0.1; done
	curl -fsS -o /dev/null --aws-sigv4 "aws:amz:us-east-1:s3" --user "$skey:$ssecret" \
		-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT "http://127.0.0.1:$sport/airlock-pathtrace"
	export AIRLOCK_S3_ENDPOINT=http://127.0.0.1:$sport AWS_ACCESS_KEY_ID=$skey AWS_SECRET_ACCESS_KEY=$ssecret AWS_REGION=us-east-1
	log "cluster (run-cluster.sh, state $AIRLOCK_CLUSTER_STATE; log $WORK/logs/cluster-up.log)"
	cluster=1
	(cd "$REPO" && AIRLOCK_CLUSTER_BIN=$BIN bash scripts/run-cluster.sh up --state "$AIRLOCK_CLUSTER_STATE" --seed-templates "$SEED" \
		--artifacts s3://airlock-pathtrace/p --node-args "--boot-snapshots=false --node-cpus 32") >"$WORK/logs/cluster-up.log" 2>&1 ||
		{ tail -n 30 "$WORK/logs/cluster-up.log" >&2; exit 1; }
	# shellcheck disable=SC1091
	lb=$(. "$AIRLOCK_CLUSTER_STATE/env" && echo "$E2B_API_URL")
	ckey=$(. "$AIRLOCK_CLUSTER_STATE/env" && echo "$E2B_API_KEY")
	sleep 10 # let start-up work (template pushes, first heartbeats) settle
	if want cluster-create; then
		"$PT" run -state "$RES" -path cluster-create -url "$lb" -key "$ckey" -template base \
			-label 'POST /sandboxes of base through haproxy → api tier → node (--boot-snapshots=false, as test.sh)'
	fi
	if want pause-resume; then
		"$PT" run -state "$RES" -path pause-resume -url "$lb" -key "$ckey" -template base \
			-label 'base: pause on A (drained, no moves), then connect at once: upload, move, resume on B'
	fi
	cp -r "$AIRLOCK_CLUSTER_STATE/logs" "$WORK/logs/cluster" 2>/dev/null || true
fi

echo
echo "### Files and returns per path ($(cat "$RES/repo"))"
echo
"$PT" table -state "$RES"
echo
echo "### Methods and lines"
echo
"$PT" counts -repo "$REPO" ${PATHTRACE_TYPES:+-types "$PATHTRACE_TYPES"}
