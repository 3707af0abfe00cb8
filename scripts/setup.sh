#!/usr/bin/env bash
# Installs what Airlock needs on a Debian 12 host and builds bin/airlock and
# bin/airlock-envd. Idempotent: safe to run again; skips what is already there.
#
# Independent work runs side by side (a fresh 2-core host spends most of its
# time here): apt-get, the pinned runsc build (Go only), the web console and
# the Go build of everything that does not embed the console start together;
# the rest of bin/airlock waits for the console, the console for node/npm when
# apt installs them, and the microVM guest kernel for linux-source. Each
# phase's wall and CPU time is printed ("==> phase NAME: N s (cpu M s)";
# bench/firstrun.sh reads these lines).
#
# Knobs:
#   AIRLOCK_BUILD_KERNEL=auto|1|0  the microVM toolchain (QEMU, linux-source and
#       what building the guest kernel needs) and the kernel build. auto (default):
#       only where microVMs can run, a CPU with hardware virtualisation (vmx/svm
#       in /proc/cpuinfo; a /dev/kvm without them, as on a PVM host, cannot run a
#       stock guest kernel). scripts/test.sh sets 1: its microVM stage runs under
#       QEMU's TCG emulation everywhere.
#   AIRLOCK_SETUP_TESTS=1  also the Debian packages only the tests need (set by
#       scripts/test.sh).
#   AIRLOCK_SETUP_RUNSC_WAIT=0  return without waiting for the runsc build, which
#       goes on in the background (scripts/run-daemon.sh: `airlock serve` waits for
#       it, building the default templates meanwhile).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0)"

SETUP_START=$(date +%s)
# cpu_now sets CPU_NOW to the CPU seconds (user + system) this shell's
# finished children used: a phase's CPU time is what it costs on any machine,
# its wall time depends on what else runs (phase_done NAME START [CPU_START]).
cpu_now() {
	local f=${TMPDIR:-/tmp}/airlock-setup-times.$BASHPID
	times >"$f"
	CPU_NOW=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); n += a[1] * 60 + a[2] } printf "%.0f", n }' "$f")
	rm -f "$f"
}
phase_done() {
	local cpu=""
	if [ -n "${3:-}" ]; then
		cpu_now
		cpu=" (cpu $((CPU_NOW - $3)) s)"
	fi
	log "phase $1: $(($(date +%s) - $2)) s$cpu"
}

# Debian packages the product needs (gVisor sandboxes, templates, networking).
# s3fs: bucket volumes (the node mounts a bucket on the host; internal/volume/bucketmount_linux.go).
pkgs=(mmdebstrap nftables iproute2 e2fsprogs util-linux ca-certificates busybox-static uidmap curl s3fs)
# Only the tests: host-side interpreter tests (the sandboxes get their own
# copies from the template), cgo builds, the proto generator.
# With them, what test.sh's later stages install, so that one apt run beside
# the builds fetches all of it: PostgreSQL (the store tests and the cluster
# start their own servers: no default cluster), haproxy (the cluster stage),
# chromium (the console stage), python3-protobuf (scripts/python-deps.sh).
if [ "${AIRLOCK_SETUP_TESTS:-0}" = 1 ]; then
	pkgs+=(protobuf-compiler gcc libc6-dev python3-ipykernel python3-matplotlib python3-matplotlib-inline python3-pandas node-acorn
		postgresql haproxy chromium python3-protobuf)
	if ! dpkg-query -W -f='${Status}' postgresql 2>/dev/null | grep -q 'install ok installed'; then
		mkdir -p /etc/postgresql-common/createcluster.d
		echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/airlock-tests.conf
	fi
fi
microvm=0
case "${AIRLOCK_BUILD_KERNEL:-auto}" in
1) microvm=1 ;;
auto) grep -qwE 'vmx|svm' /proc/cpuinfo && microvm=1 ;;
esac
if [ "$microvm" = 1 ]; then
	# microVM runtime: the VMM and its image tool, and what scripts/build-kernel.sh needs.
	pkgs+=(qemu-system-x86 qemu-utils linux-source-6.1 xz-utils bc flex bison libelf-dev libssl-dev make)
fi

node_ok() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
	local major
	major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || return 1
	[ "${major:-0}" -ge 18 ]
}
node_present=0
if node_ok; then
	node_present=1
	log "node $(node --version) and npm $(npm --version 2>/dev/null) present"
else
	pkgs+=(nodejs npm)
fi

# Go toolchain (not from Debian: bookworm's Go is too old for go.mod).
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin "$HOME/go/bin"; do
		[ -x "$d/go" ] && PATH="$d:$PATH"
	done
fi
command -v go >/dev/null 2>&1 || die "Go $(sed -n 's/^go //p' go.mod) or newer is required (https://go.dev/dl/)"
log "$(go version)"
export GOFLAGS="${GOFLAGS:--mod=mod}"

LOGS=$(mktemp -d /tmp/airlock-setup.XXXXXX)
runsc_detached=""
cleanup() {
	# Phases still running when setup fails (jobs -p: only live ones of
	# ours), except a runsc build left to the daemon.
	local p
	for p in $(jobs -p); do
		[ "$p" = "$runsc_detached" ] || kill "$p" 2>/dev/null || true
	done
	rm -rf "$LOGS"
}
trap cleanup EXIT

# wait_job NAME PID: waits for a background phase; on failure prints its log.
wait_job() {
	if ! wait "$2"; then
		printf 'setup: %s failed; its output:\n' "$1" >&2
		tail -n 40 "$LOGS/$1.log" >&2
		return 1
	fi
	cat "$LOGS/$1.log"
}

# ---- apt (background)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
apt_job() {
	local t=$(date +%s)
	cpu_now
	local c=$CPU_NOW
	if [ "${#missing[@]}" -gt 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -q
		log "installing: ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
	else
		log "Debian packages present: ${pkgs[*]}"
	fi
	phase_done apt "$t" "$c"
}
apt_job >"$LOGS/apt.log" 2>&1 &
apt_pid=$!

# ---- runsc (background; Go only, a few minutes of CPU on a fresh host)
runsc_job() {
	local t=$(date +%s)
	cpu_now
	local c=$CPU_NOW
	bash scripts/build-runsc.sh >/dev/null
	phase_done runsc "$t" "$c"
}
runsc_wait=${AIRLOCK_SETUP_RUNSC_WAIT:-1}
if [ "$runsc_wait" = 1 ]; then
	runsc_job >"$LOGS/runsc.log" 2>&1 &
	runsc_pid=$!
else
	runsc_log=$(mktemp /tmp/airlock-runsc-build.XXXXXX.log)
	# At a lower priority while setup builds bin/airlock, which the templates
	# wait for (the daemon needs runsc only to serve); back to the normal one
	# once bin/airlock is built, below.
	setsid nice -n 10 bash -c "$(declare -f log cpu_now phase_done runsc_job); runsc_job" </dev/null >"$runsc_log" 2>&1 &
	runsc_pid=$!
	runsc_detached=$runsc_pid
fi

# ---- Go (background, beside the web console): the modules, the static
# agent, and every package of bin/airlock that does not embed the console
# (internal/console and what imports it are compiled once the console is
# built, below; a concurrent compile of them could cache a half-written dist).
mod=$(sed -n 's/^module //p' go.mod)
go_job() {
	local t=$(date +%s) pkgs
	cpu_now
	local c=$CPU_NOW
	mkdir -p bin
	log "building bin/airlock-envd (static)"
	CGO_ENABLED=0 go build -o bin/airlock-envd ./cmd/airlock-envd || return 1
	mapfile -t pkgs < <(go list -e -deps -f '{{if not .Standard}}{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{end}}' ./cmd/airlock |
		awk -v c="$mod/internal/console" '$1 != c && index($0, " " c " ") == 0 && substr($0, length($0) - length(c)) != " " c { print $1 }')
	[ "${#pkgs[@]}" -gt 0 ] || { log "go list found no packages of bin/airlock"; return 1; }
	log "compiling ${#pkgs[@]} packages of bin/airlock beside the web console"
	go build "${pkgs[@]}" || return 1
	phase_done go-deps "$t" "$c"
}
go_job >"$LOGS/go.log" 2>&1 &
go_pid=$!

# ---- web console front-end (web/console → internal/console/dist, embedded
# by go:embed). Rebuilt only when its sources or lock file changed; needs
# node, so after apt when apt installs it.
build_console() {
	local dist=internal/console/dist stamp t=$(date +%s)
	cpu_now
	local c=$CPU_NOW
	stamp=$(cat web/console/package-lock.json web/console/vite.config.js web/console/index.html \
		$(find web/console/src -type f | sort) | sha256sum | cut -d' ' -f1)
	if [ -f "$dist/index.html" ] && [ "$(cat "$dist/.stamp" 2>/dev/null)" = "$stamp" ]; then
		log "web console up to date"
		return 0
	fi
	log "building the web console (npm ci + vite build)"
	(cd web/console && npm ci --no-audit --no-fund --loglevel=error) || return 1
	rm -rf "$dist/assets" "$dist/index.html" "$dist/.stamp"
	# (e2b's bundle names node: modules it only uses under Node; Vite warns about each.)
	(cd web/console && npx --no-install vite build --logLevel warn 2>&1) | { grep -v 'externalized for browser compatibility' || true; }
	[ -f "$dist/index.html" ] || return 1
	echo "$stamp" >"$dist/.stamp"
	phase_done console "$t" "$c"
}
if [ "$node_present" = 0 ]; then
	log "waiting for apt (node and npm) before the web console"
	wait_job apt "$apt_pid" || die "apt-get failed"
	apt_pid=""
	node_ok || die "node >= 18 and npm are required"
fi
build_console || die "building the web console failed"

# ---- airlock (foreground, beside apt and runsc): what the console changed, and the link
wait_job go "$go_pid" || die "building airlock's packages failed"
t=$(date +%s)
cpu_now
c=$CPU_NOW
log "building bin/airlock"
go build -o bin/airlock ./cmd/airlock
phase_done airlock-build "$t" "$c"
if [ -n "$runsc_detached" ] && kill -0 "$runsc_detached" 2>/dev/null; then
	renice -n 0 -g "$runsc_detached" >/dev/null 2>&1 || true
fi

if [ -n "$apt_pid" ]; then
	wait_job apt "$apt_pid" || die "apt-get failed"
fi
node_ok || die "node >= 18 and npm are required"

# ---- guest kernel (background, after apt: it needs linux-source). Only
# where microVMs run (or AIRLOCK_BUILD_KERNEL=1); elsewhere the daemon runs
# gVisor, and `airlock serve --runtime microvm` says to build it.
kernel_pid=""
if [ "$microvm" = 1 ]; then
	kernel_job() {
		local t=$(date +%s)
		cpu_now
		local c=$CPU_NOW
		log "building the microVM guest kernel (cached after the first build)"
		bash scripts/build-kernel.sh >/dev/null
		phase_done kernel "$t" "$c"
	}
	kernel_job >"$LOGS/kernel.log" 2>&1 &
	kernel_pid=$!
else
	log "microVM toolchain and guest kernel skipped (no hardware virtualisation: the daemon uses gVisor; AIRLOCK_BUILD_KERNEL=1 installs and builds them)"
fi

if [ "$runsc_wait" = 1 ]; then
	wait_job runsc "$runsc_pid" || die "building runsc failed"
else
	# Return once the build holds its lock (the daemon waits on it), is
	# done, or failed.
	runsc_cache=${AIRLOCK_RUNSC_CACHE:-/var/cache/airlock/runsc}
	runsc_bin=$runsc_cache/$(tr -d ' \n' <internal/runtime/gvisor/runsc.version)/runsc
	while kill -0 "$runsc_pid" 2>/dev/null && [ ! -x "$runsc_bin" ] &&
		{ [ ! -e "$runsc_cache/.lock" ] || flock -n -s "$runsc_cache/.lock" true; }; do
		sleep 0.2
	done
	if [ -x "$runsc_bin" ]; then
		log "runsc ready: $runsc_bin"
	elif kill -0 "$runsc_pid" 2>/dev/null; then
		log "runsc still building in the background (log: $runsc_log); airlock serve waits for it"
	else
		cat "$runsc_log" >&2
		die "building runsc failed"
	fi
fi
if [ -n "$kernel_pid" ]; then
	wait_job kernel "$kernel_pid" || die "building the microVM guest kernel failed"
fi
phase_done setup "$SETUP_START"
log "setup done: $(pwd)/bin/airlock"
