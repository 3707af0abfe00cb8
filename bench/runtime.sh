#!/usr/bin/env bash
# Side-by-side runtime benchmark (bench/cmd/runtime-bench): starts two
# daemons on one data dir's templates - --runtime gvisor and --runtime
# microvm (emulated without hardware KVM) - with their own prefixes, subnets
# and ports, runs the same interleaved workload on both, stops them.
# Knobs: AIRLOCK_BENCH_DATA_DIR (templates source, default /var/lib/airlock),
# AIRLOCK_BENCH_PREFIX (default albn; the daemons use <prefix>g / <prefix>v),
# AIRLOCK_BENCH_SUBNETS (two /16s, default "10.74.0.0/16 10.75.0.0/16"); extra
# arguments go to runtime-bench (e.g. -n 20).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GOFLAGS="${GOFLAGS:--mod=mod}"
SRC=${AIRLOCK_BENCH_DATA_DIR:-/var/lib/airlock}
PREFIX=${AIRLOCK_BENCH_PREFIX:-albn}
read -r -a SUBNETS <<<"${AIRLOCK_BENCH_SUBNETS:-10.74.0.0/16 10.75.0.0/16}"
KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
WORK=$(mktemp -d /tmp/airlock-runtime-bench.XXXXXX)
mkdir -p bin
go build -o bin/runtime-bench ./bench/cmd/runtime-bench

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK/data-gvisor" "$WORK/data-microvm" # template hard links, root images
}
trap cleanup EXIT
urls=()
i=0
for rt in gvisor microvm; do
	data="$WORK/data-$rt"
	mkdir -p "$data/templates"
	for d in "$SRC"/templates/*/; do
		[ -f "$d/meta.json" ] && cp -al "$d" "$data/templates/$(basename "$d")"
	done
	port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
	bin/airlock serve --runtime "$rt" --templates base --listen "127.0.0.1:$port" --data-dir "$data" \
		--api-key "$KEY" --net-prefix "$PREFIX${rt:0:1}" --subnet "${SUBNETS[$i]}" --kill-on-exit \
		</dev/null >"$WORK/daemon-$rt.log" 2>&1 &
	pids+=($!)
	urls+=("http://127.0.0.1:$port")
	for _ in $(seq 1 120); do curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break; sleep 1; done
	i=$((i + 1))
done
grep -h 'isolation runtime' "$WORK"/daemon-*.log
bin/runtime-bench -gvisor "${urls[0]}" -microvm "${urls[1]}" -api-key "$KEY" "$@"
