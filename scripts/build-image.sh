#!/usr/bin/env bash
# Builds the Airlock OCI image, both roles (`airlock serve --role api|node`),
# without a container engine: Debian packages (mmdebstrap) and our own Go code
# (deploy/image/mkimage, go-containerregistry). Run as root (mmdebstrap
# --mode=root).
#
#   sudo scripts/build-image.sh [OUT]
#   scripts/build-image.sh --print-ref   (prints REPO:TAG and exits)
#
# The image, REPO:TAG, is what the Helm chart runs by default: REPO is
# deploy/helm/airlock/values.yaml's image.repository, TAG the chart's
# appVersion (Chart.yaml). Two layers:
#   1. Debian bookworm (minbase) with what a node needs at run time: QEMU
#      (qemu-system-x86, qemu-utils), mmdebstrap, e2fsprogs, nftables, iproute2,
#      util-linux, busybox-static, ca-certificates. Built once per package list
#      and cached as $AIRLOCK_IMAGE_CACHE (default /var/cache/airlock/image)/<hash>/base.tar.gz.
#   2. /usr/local/bin/airlock and airlock-envd (static builds of this checkout),
#      the pinned runsc (scripts/build-runsc.sh) and the microVM guest kernel
#      (scripts/build-kernel.sh), at the paths the daemon looks in by default
#      (/var/cache/airlock/runsc/<version>/runsc, /var/cache/airlock/kernel/<hash>/vmlinux).
# The output is an OCI archive (a tar of an OCI image layout), default
# bin/airlock-image-<TAG>.oci.tar; its last output line is "PATH REPO:TAG DIGEST".
# Push it with skopeo (Debian's `skopeo`), e.g.
#   skopeo copy oci-archive:bin/airlock-image-<TAG>.oci.tar:<TAG> docker://REPO:TAG
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf '==> image: %s\n' "$*" >&2; }
die() { printf 'build-image: %s\n' "$*" >&2; exit 1; }
tag=$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' deploy/helm/airlock/Chart.yaml)
repo=$(awk '/^image:/ { f = 1; next } f && /^[^[:space:]#]/ { f = 0 } f && $1 == "repository:" { print $2; exit }' deploy/helm/airlock/values.yaml)
[ -n "$tag" ] && [ -n "$repo" ] || die "could not read the chart's image.repository and appVersion"
if [ "${1:-}" = --print-ref ]; then
	echo "$repo:$tag"
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap --mode=root; try: sudo $0)"
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin "$HOME/go/bin"; do [ -x "$d/go" ] && PATH="$d:$PATH"; done
fi
command -v mmdebstrap >/dev/null 2>&1 || die "mmdebstrap missing (apt-get install mmdebstrap)"
out=${1:-bin/airlock-image-$tag.oci.tar}
start=$(date +%s)

# ---- layer 1: Debian, cached per package list
suite=bookworm
pkgs=(ca-certificates iproute2 nftables e2fsprogs util-linux mmdebstrap busybox-static procps
	qemu-system-x86 qemu-utils)
cache=${AIRLOCK_IMAGE_CACHE:-/var/cache/airlock/image}
hash=$(printf '%s\n' "v1" "$suite" "${pkgs[@]}" | sha256sum | cut -c1-16)
base=$cache/$hash/base.tar.gz
if [ -s "$base" ]; then
	log "base layer cached: $base"
else
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [ ! -s "$base" ]; then
		t=$(date +%s)
		log "base layer: mmdebstrap $suite with ${pkgs[*]} (once per package list)"
		mkdir -p "$cache/$hash"
		# No documentation, manual pages or translations (as the templates).
		mmdebstrap --quiet --mode=root --variant=minbase --include="$(IFS=,; echo "${pkgs[*]}")" \
			--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
			--dpkgopt='path-exclude=/usr/share/info/*' \
			--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
			"$suite" "$base.tmp.tar.gz" || die "mmdebstrap failed"
		mv "$base.tmp.tar.gz" "$base"
		log "base layer built in $(($(date +%s) - t)) s ($(du -h "$base" | cut -f1))"
	fi
	exec 9>&-
fi

# ---- layer 2: our binaries, runsc, the guest kernel
stage=$(mktemp -d /tmp/airlock-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
export GOFLAGS="${GOFLAGS:--mod=mod}"
mkdir -p "$stage/usr/local/bin" "$stage/var/lib/airlock"
log "building airlock and airlock-envd (static)"
CGO_ENABLED=0 go build -o "$stage/usr/local/bin/airlock" ./cmd/airlock
CGO_ENABLED=0 go build -o "$stage/usr/local/bin/airlock-envd" ./cmd/airlock-envd
runsc=$(bash scripts/build-runsc.sh | tail -n 1) || die "building runsc failed"
ver=$(tr -d ' \n' <internal/runtime/gvisor/runsc.version)
mkdir -p "$stage/var/cache/airlock/runsc/$ver"
cp "$runsc" "$stage/var/cache/airlock/runsc/$ver/runsc"
kernel=$(bash scripts/build-kernel.sh | tail -n 1) || die "building the guest kernel failed (apt-get install linux-source-6.1 flex bison bc libelf-dev libssl-dev)"
kdir=$stage/var/cache/airlock/kernel/$(basename "$(dirname "$kernel")")
mkdir -p "$kdir"
cp "$kernel" "$kdir/vmlinux"

log "assembling $repo:$tag"
mkdir -p "$(dirname "$out")"
trap 'rm -rf "$stage" "$stage.mkimage"' EXIT
go build -o "$stage.mkimage" ./deploy/image/mkimage
"$stage.mkimage" build -base "$base" -files "$stage" -ref "$repo:$tag" -version "$tag" -out "$out"
log "done in $(($(date +%s) - start)) s: $out ($(du -h "$out" | cut -f1))"
