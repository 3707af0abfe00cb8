#!/usr/bin/env bash
# Old vs new gVisor, each through Airlock and next to bare runsc, in one run:
#   old = Debian 12's runsc 0.0~20221219 on ptrace (the .deb is downloaded with
#         apt-get download and unpacked with dpkg-deb -x into a cache dir; it
#         replaces nothing on the host),
#   new = the pinned runsc of scripts/build-runsc.sh on systrap.
# Starts one daemon per runsc (--runsc, --runsc-platform) on copies (hard
# links) of a data dir's templates, runs bench/gvisor.mjs against both
# (samples interleaved), which also runs the bare-runsc baselines, and stops
# them. Needs root.
#
# The 2022 runsc needs two things the daemon no longer does for it; the
# wrapper below does them: it hides /proc/sys/net in a private mount namespace
# (its root-netns check looked for rmem_default, present in every namespace on
# kernel 6.x) and waits 30 ms before `checkpoint` (it stopped a sandbox whose
# TCP endpoint was still watched by epoll: the agent closes its /freeze
# connection just after the daemon resets it). Templates built by this branch
# have no statx preload, so `ls -l` fails under the old runsc; the workloads
# here do not use it.
#
# Knobs: AIRLOCK_BENCH_DATA_DIR (templates source, default /var/lib/airlock),
# AIRLOCK_BENCH_PREFIX (default algb; daemons use <prefix>o / <prefix>n),
# AIRLOCK_BENCH_SUBNETS (two /16s, default "10.84.0.0/16 10.85.0.0/16"),
# BENCH_N (samples of the fast workloads, default 20), BENCH_N_SLOW (dd,
# import, fork, default 3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC=${AIRLOCK_BENCH_DATA_DIR:-/var/lib/airlock}
PREFIX=${AIRLOCK_BENCH_PREFIX:-algb}
read -r -a SUBNETS <<<"${AIRLOCK_BENCH_SUBNETS:-10.84.0.0/16 10.85.0.0/16}"
KEY="e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')"
WORK=$(mktemp -d /tmp/airlock-gvisor-bench.XXXXXX)
log() { printf '==> %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { echo "gvisor bench: needs root" >&2; exit 2; }
[ -x bin/airlock ] || { echo "gvisor bench: bin/airlock missing (run scripts/setup.sh)" >&2; exit 2; }

NEW_RUNSC=$(bash scripts/build-runsc.sh 2>/dev/null | tail -n 1)
# The Debian package, unpacked (never installed).
deb_cache=/var/cache/airlock/runsc-debian
if [ ! -x "$deb_cache/root/usr/bin/runsc" ]; then
	log "fetching Debian's runsc package (apt-get download, dpkg-deb -x into $deb_cache)"
	mkdir -p "$deb_cache"
	(cd "$deb_cache" && apt-get download -q -o APT::Sandbox::User=root runsc >/dev/null)
	dpkg-deb -x "$(ls -t "$deb_cache"/runsc_*.deb | head -n 1)" "$deb_cache/root"
fi
OLD_BIN="$deb_cache/root/usr/bin/runsc"
OLD_RUNSC="$WORK/runsc-2022"
cat >"$OLD_RUNSC" <<EOF
#!/bin/sh
for a in "\$@"; do [ "\$a" = checkpoint ] && sleep 0.03 && break; done
exec unshare --mount --propagation slave -- sh -c 'mount -t tmpfs -o ro,size=4k,mode=555 airlock-netmask /proc/sys/net && exec "\$0" "\$@"' "$OLD_BIN" "\$@"
EOF
chmod +x "$OLD_RUNSC"
log "old: $("$OLD_BIN" --version | head -n 1) (ptrace); new: $(basename "$(dirname "$NEW_RUNSC")") (systrap)"

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	for d in "$WORK"/data-*/runsc; do umount -l "$d/null-netns" 2>/dev/null || true; done
	rm -rf "$WORK"/data-*
}
trap cleanup EXIT
targets=()
i=0
for v in old new; do
	data="$WORK/data-$v"
	mkdir -p "$data/templates"
	for d in "$SRC"/templates/*/; do
		[ -f "$d/meta.json" ] && cp -al "$d" "$data/templates/$(basename "$d")"
	done
	if [ "$v" = old ]; then runsc=$OLD_RUNSC bare=$OLD_BIN platform=ptrace; else runsc=$NEW_RUNSC bare=$NEW_RUNSC platform=systrap; fi
	port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
	log "starting the $v daemon (data $data, log $WORK/daemon-$v.log)"
	bin/airlock serve --runtime gvisor --runsc "$runsc" --runsc-platform "$platform" --listen "127.0.0.1:$port" \
		--data-dir "$data" --api-key "$KEY" --net-prefix "$PREFIX${v:0:1}" --subnet "${SUBNETS[$i]}" --kill-on-exit \
		</dev/null >"$WORK/daemon-$v.log" 2>&1 &
	pids+=($!)
	targets+=("$v=http://127.0.0.1:$port=$runsc=$bare=$platform=$data")
	i=$((i + 1))
done
for t in "${targets[@]}"; do
	url=$(cut -d= -f2 <<<"$t")
	for _ in $(seq 1 900); do curl -fsS -m 2 -o /dev/null "$url/health" 2>/dev/null && break; sleep 1; done
	curl -fsS "$url/health" >&2 && echo >&2
done
# Boot snapshots are made after /health answers; wait for both.
for v in old new; do
	for _ in $(seq 1 300); do grep -q 'boot snapshot ready' "$WORK/daemon-$v.log" && break; sleep 1; done
done
BENCH_TARGETS=$(
	IFS=,
	echo "${targets[*]}"
) E2B_API_KEY=$KEY node bench/gvisor.mjs
