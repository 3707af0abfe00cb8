#!/usr/bin/env bash
# Installs what Airlock needs on a Debian 12 host and builds bin/airlock and
# bin/airlock-envd. Idempotent: safe to run again; skips what is already there.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0)"

# Debian packages the product and the tests need.
pkgs=(mmdebstrap nftables iproute2 e2fsprogs util-linux protobuf-compiler ca-certificates busybox-static uidmap curl gcc libc6-dev
	# host-side interpreter tests (the sandboxes get their own copies from the template)
	python3-ipykernel python3-matplotlib python3-matplotlib-inline python3-pandas node-acorn
	# microVM runtime: the VMM and its image tool, and what scripts/build-kernel.sh needs
	qemu-system-x86 qemu-utils linux-source-6.1 xz-utils bc flex bison libelf-dev libssl-dev make)

node_ok() {
	command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
	local major
	major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || return 1
	[ "${major:-0}" -ge 18 ]
}
if node_ok; then
	log "node $(node --version) and npm $(npm --version 2>/dev/null) present"
else
	pkgs+=(nodejs npm)
fi

missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	log "apt-get update"
	DEBIAN_FRONTEND=noninteractive apt-get update -q
	log "installing: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
	log "Debian packages present: ${pkgs[*]}"
fi

node_ok || die "node >= 18 and npm are required"

# Go toolchain (not from Debian: bookworm's Go is too old for go.mod).
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin "$HOME/go/bin"; do
		[ -x "$d/go" ] && PATH="$d:$PATH"
	done
fi
command -v go >/dev/null 2>&1 || die "Go $(sed -n 's/^go //p' go.mod) or newer is required (https://go.dev/dl/)"
log "$(go version)"

# Web console front-end (web/console → internal/console/dist, embedded by
# go:embed). Rebuilt only when its sources or lock file changed.
build_console() {
	local dist=internal/console/dist stamp
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
}
build_console || die "building the web console failed"

export GOFLAGS="${GOFLAGS:--mod=mod}"
mkdir -p bin
log "building bin/airlock"
go build -o bin/airlock ./cmd/airlock
log "building bin/airlock-envd (static)"
CGO_ENABLED=0 go build -o bin/airlock-envd ./cmd/airlock-envd
# gVisor's runsc at the pinned version (built once per machine, cached;
# static Go build from the gVisor module, not Debian's 2022 package).
bash scripts/build-runsc.sh >/dev/null || die "building runsc failed"
# Guest kernel for the microVM runtime (built once per machine, cached; a
# few minutes). Only where `--runtime auto` picks microVMs: a CPU with
# hardware virtualisation. Elsewhere the daemon runs gVisor and starts at
# once; `airlock serve --runtime microvm` builds the kernel on first use, and
# scripts/test.sh builds it for the microVM tests.
if [ "${AIRLOCK_BUILD_KERNEL:-auto}" = 1 ] || { [ "${AIRLOCK_BUILD_KERNEL:-auto}" = auto ] && grep -qwE 'vmx|svm' /proc/cpuinfo; }; then
	log "building the microVM guest kernel (cached after the first build)"
	bash scripts/build-kernel.sh >/dev/null || die "building the microVM guest kernel failed"
else
	log "microVM guest kernel not built (no hardware virtualisation: the daemon uses gVisor; 'airlock serve --runtime microvm' builds it on first use)"
fi
log "setup done: $(pwd)/bin/airlock"
