#!/usr/bin/env bash
# create → first runCode of code-interpreter-v1 on gVisor and on microVMs
# (emulated without hardware KVM), side by side in one run: cold boot, boot
# snapshot, warm pool (bench/snapshots.mjs with BENCH_TARGETS). Starts two
# daemons with --warm-pool code-interpreter-v1=1, waits for both boot
# snapshots and pools, runs the bench, stops them.
# Knobs: AIRLOCK_BENCH_DATA_DIR (templates source, default /var/lib/airlock),
# AIRLOCK_BENCH_GVISOR_DATA / AIRLOCK_BENCH_VM_DATA (the daemons' data dirs;
# default fresh dirs under /tmp, where the microVM side first builds its
# root image), AIRLOCK_BENCH_PREFIXES (gVisor's and the microVM daemon's
# --net-prefix, default "albsg albsv"), AIRLOCK_BENCH_SUBNETS (two /16s, default
# "10.76.0.0/16 10.77.0.0/16"), BENCH_N (samples per mode, default 10).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=${AIRLOCK_BENCH_DATA_DIR:-/var/lib/airlock}
read -r -a PREFIXES <<<"${AIRLOCK_BENCH_PREFIXES:-albsg albsv}"
read -r -a SUBNETS <<<"${AIRLOCK_BENCH_SUBNETS:-10.76.0.0/16 10.77.0.0/16}"
KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
WORK=$(mktemp -d /tmp/airlock-snapshots-bench.XXXXXX)
declare -A DATA=([gvisor]=${AIRLOCK_BENCH_GVISOR_DATA:-$WORK/data-gvisor} [microvm]=${AIRLOCK_BENCH_VM_DATA:-$WORK/data-microvm})

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK/data-gvisor" "$WORK/data-microvm"
}
trap cleanup EXIT
targets=()
i=0
for rt in gvisor microvm; do
	data=${DATA[$rt]}
	mkdir -p "$data/templates"
	for d in "$SRC"/templates/*/; do
		n=$(basename "$d")
		[ -f "$d/meta.json" ] && [ ! -e "$data/templates/$n" ] && cp -al "$d" "$data/templates/$n" || true
	done
	port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
	bin/airlock serve --runtime "$rt" --templates base,code-interpreter-v1 --warm-pool code-interpreter-v1=1 \
		--listen "127.0.0.1:$port" --data-dir "$data" --api-key "$KEY" --net-prefix "${PREFIXES[$i]}" \
		--subnet "${SUBNETS[$i]}" --kill-on-exit </dev/null >"$WORK/daemon-$rt.log" 2>&1 &
	pids+=($!)
	targets+=("$rt=http://127.0.0.1:$port")
	# One after the other: each daemon sets its network up alone.
	for _ in $(seq 1 300); do curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break; sleep 1; done
	i=$((i + 1))
done
for rt in gvisor microvm; do
	log=$WORK/daemon-$rt.log
	for _ in $(seq 1 600); do grep -q 'warm pool: sandbox ready' "$log" && break; sleep 1; done
	grep -q 'warm pool: sandbox ready' "$log" || { echo "$rt: no warm pool after 10 min; log:"; tail -n 30 "$log"; exit 1; }
	grep -h -m1 'isolation runtime' "$log" | cut -c1-160
	grep -h -m1 'boot snapshot ready' "$log"
done
BENCH_TARGETS=$(IFS=,; echo "${targets[*]}") E2B_API_URL=${targets[0]#*=} E2B_API_KEY=$KEY node bench/snapshots.mjs
