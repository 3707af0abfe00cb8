#!/usr/bin/env bash
# Time to a ready daemon on a "fresh machine", phase by phase: the README's
# `sudo scripts/run-daemon.sh`, from a clean clone, with every cache empty.
#
#   sudo bench/firstrun.sh [REPO]      (REPO: the checkout to clone, default this one)
#
# What is fresh (all under one scratch dir, removed at the end):
#   - a clone of REPO's HEAD (no bin/, no built web console),
#   - GOCACHE and GOMODCACHE (modules come from the Go proxy again),
#   - npm's cache (npm_config_cache),
#   - runsc's cache (AIRLOCK_RUNSC_CACHE; the daemon gets --runsc from it),
#   - the daemon's data dir (both default templates are built).
# What is not: Debian packages already installed stay installed (apt cannot
# be undone on a shared host). The apt phase is measured apart instead:
# `apt-get install --reinstall --download-only` of setup.sh's package list
# into an empty archive dir (the download; unpacking is not measured), with
# the sizes apt reports. /var/cache/airlock and /var/lib/airlock-test are
# never touched.
#
# Prints each phase (setup's own "phase" lines, then the daemon's), and
#   ready(base)  seconds from start to GET /health 200 and a base sandbox
#                that runs a command;
#   ready(all)   seconds until /health lists nothing building
#                (code-interpreter-v1 ready).
# Knobs: FIRSTRUN_NET_PREFIX (default alfr), FIRSTRUN_SUBNET (default
# 10.77.0.0/20), FIRSTRUN_SCRATCH (default a new dir under /var/tmp),
# FIRSTRUN_SKIP_APT=1 (skip the apt download measurement).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
repo=${1:-$here}
[ "$(id -u)" -eq 0 ] || { echo "firstrun: run as root" >&2; exit 1; }
prefix=${FIRSTRUN_NET_PREFIX:-alfr}
subnet=${FIRSTRUN_SUBNET:-10.77.0.0/20}
scratch=${FIRSTRUN_SCRATCH:-$(mktemp -d /var/tmp/airlock-firstrun.XXXXXX)}
mkdir -p "$scratch"
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	nft delete table inet "$prefix" 2>/dev/null || true
	# Module cache files are read-only.
	chmod -R u+w "$scratch" 2>/dev/null || true
	rm -rf "$scratch"
}
trap cleanup EXIT

ts() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(ts)" 'BEGIN { printf "%.1f", b - a }'; }
# ref: a same-run reference for a shared machine: a fixed single-threaded
# CPU task's wall time over its CPU time (1.0 on an idle machine; 5 means a
# core gave it a fifth of its time), and the load average.
ref() {
	python3 -c '
import time, os
w, c = time.time(), time.process_time()
n = 0
for i in range(5_000_000): n += i
w, c = time.time() - w, time.process_time() - c
print("ref: fixed CPU task %.1f s wall / %.1f s cpu = slowdown %.1f; load %s" % (w, c, w / c, " ".join(open("/proc/loadavg").read().split()[:3])))'
}
# cpu_of PID: CPU seconds of PID itself and of its reaped children (the
# daemon's children: setup.sh before its exec, then the template builds).
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "self %.0f s, children %.0f s", ($12 + $13) / hz, ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null; }

echo "firstrun: repo $repo ($(git -C "$repo" rev-parse --short HEAD)), scratch $scratch, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
ref

# ---- apt, measured apart (download only, into an empty archive dir)
if [ "${FIRSTRUN_SKIP_APT:-0}" != 1 ]; then
	mapfile -t pkgs < <(sed -n 's/^pkgs=(\(.*\))$/\1/p' "$repo/scripts/setup.sh" | tr ' ' '\n' | grep -v '^$')
	if grep -qwE 'vmx|svm' /proc/cpuinfo; then
		mapfile -t -O "${#pkgs[@]}" pkgs < <(sed -n 's/^\tpkgs+=(\(qemu.*\))$/\1/p' "$repo/scripts/setup.sh" | tr ' ' '\n' | grep -v '^$')
	fi
	mkdir -p "$scratch/apt/archives/partial"
	t=$(ts)
	if out=$(apt-get install -y -q --reinstall --download-only --no-install-recommends \
		-o Dir::Cache::archives="$scratch/apt/archives" "${pkgs[@]}" 2>&1); then
		size=$(du -sm "$scratch/apt/archives" | cut -f1)
		echo "phase apt-download: $(since "$t") s, ${#pkgs[@]} packages named, $(ls "$scratch/apt/archives"/*.deb 2>/dev/null | wc -l) .debs, ${size} MiB ($(grep -E '^Need to get' <<<"$out" | head -n 1))"
	else
		echo "phase apt-download: failed: $(tail -n 3 <<<"$out")"
	fi
	rm -rf "$scratch/apt"
fi

# ---- a clean clone, empty caches
git clone -q --no-hardlinks "$repo" "$scratch/src"
git -C "$scratch/src" checkout -q "$(git -C "$repo" rev-parse HEAD)"
export GOCACHE=$scratch/gocache GOMODCACHE=$scratch/gomod npm_config_cache=$scratch/npm AIRLOCK_RUNSC_CACHE=$scratch/runsc
export GOFLAGS=-mod=mod
ver=$(tr -d ' \n' <"$scratch/src/internal/runtime/gvisor/runsc.version")
data=$scratch/data
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log=$scratch/run-daemon.log

start=$(ts)
echo "firstrun: scripts/run-daemon.sh --listen 127.0.0.1:$port --data-dir $data (log $log)"
(cd "$scratch/src" && exec scripts/run-daemon.sh --listen "127.0.0.1:$port" --data-dir "$data" \
	--net-prefix "$prefix" --subnet "$subnet" --kill-on-exit) >"$log" 2>&1 &
pid=$!

key() { tr -d ' \n' <"$data/api-key" 2>/dev/null; }
ready_base="" ready_all="" setup_end="" shown=0
while kill -0 "$pid" 2>/dev/null; do
	# setup's phase lines as they come
	n=$(grep -c '^==> phase ' "$log" || true)
	if [ "$n" -gt "$shown" ]; then
		grep '^==> phase ' "$log" | tail -n +$((shown + 1)) | sed "s/^==> /  [$(since "$start") s] /"
		shown=$n
	fi
	if [ -z "$setup_end" ] && grep -q '^==> setup done' "$log"; then setup_end=$(since "$start"); fi
	body=$(curl -fsS -m 2 "http://127.0.0.1:$port/health" 2>/dev/null || true)
	if [ -n "$body" ] && [ -z "$ready_base" ]; then
		h=$(since "$start")
		# A base sandbox that runs a command: "serving base", not just 200.
		code=$(curl -sS -m 600 -o "$scratch/create.json" -w '%{http_code}' -H "X-API-Key: $(key)" -H 'Content-Type: application/json' \
			-d '{"templateID":"base","timeout":60}' "http://127.0.0.1:$port/sandboxes" || true)
		if [ "$code" != 201 ]; then
			echo "  [$(since "$start") s] /health 200 at $h s ($body), but a base create answered ${code:-nothing}: $(head -c 600 "$scratch/create.json" 2>/dev/null)"
			echo "firstrun: the daemon's last warnings and errors:"
			grep -E 'level=(WARN|ERROR)' "$log" | tail -n 20 | cut -c1-400
			exit 1
		fi
		sb=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandboxID"])' "$scratch/create.json")
		curl -fsS -m 10 -X DELETE -H "X-API-Key: $(key)" "http://127.0.0.1:$port/sandboxes/$sb" >/dev/null || true
		ready_base=$(since "$start")
		echo "  [$ready_base s] /health 200 at $h s ($body); base sandbox $sb created; daemon cpu: $(cpu_of "$pid"); load $(cut -d' ' -f1-3 /proc/loadavg)"
	fi
	if [ -n "$ready_base" ] && [ -n "$body" ] && ! grep -q '"building"' <<<"$body"; then
		ready_all=$(since "$start")
		echo "  [$ready_all s] nothing building: code-interpreter-v1 ready; daemon cpu: $(cpu_of "$pid"); load $(cut -d' ' -f1-3 /proc/loadavg)"
		break
	fi
	sleep 1
done
if [ -z "$ready_all" ]; then
	echo "firstrun: the daemon exited or never got ready; last lines:"
	tail -n 30 "$log"
	exit 1
fi
grep -E 'template ready|built template' "$log" | sed 's/^/  daemon: /' | cut -c1-220
# The runsc build left to the daemon logs apart (setup.sh names the file).
rlog=$(sed -n 's/.*runsc still building in the background (log: \(.*\)); .*/\1/p' "$log" | head -n 1)
if [ -n "$rlog" ] && [ -f "$rlog" ]; then grep '^==> phase' "$rlog" | sed 's/^==> /  (background) /'; rm -f "$rlog"; fi
ref
echo "RESULT setup=${setup_end}s ready(base)=${ready_base}s ready(all)=${ready_all}s load=$(cut -d' ' -f1-3 /proc/loadavg)"
