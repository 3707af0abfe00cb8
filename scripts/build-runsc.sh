#!/usr/bin/env bash
# Builds the gVisor runsc that Airlock runs, from the gVisor Go module at the
# version pinned in internal/runtime/gvisor/runsc.version:
#   CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@<version>
# Static on purpose: a cgo build fails at sandbox start ("fork/exec
# /proc/self/exe: no such file or directory": no dynamic loader in gVisor's
# chroot). Cached per version under $AIRLOCK_RUNSC_CACHE (default
# /var/cache/airlock/runsc)/<version>/runsc, so it runs once per machine; that is
# where `airlock serve` looks by default. Prints the path of the binary on its
# last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> runsc: %s\n' "$*" >&2; }
die() { printf 'build-runsc: %s\n' "$*" >&2; exit 1; }

ver=$(tr -d ' \n' <internal/runtime/gvisor/runsc.version)
[ -n "$ver" ] || die "empty internal/runtime/gvisor/runsc.version"
cache="${AIRLOCK_RUNSC_CACHE:-/var/cache/airlock/runsc}"
out="$cache/$ver"


if [ -x "$out/runsc" ]; then
	log "cached $out/runsc"
	echo "$out/runsc"
	exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$out/runsc" ]; then
	echo "$out/runsc"
	exit 0
fi
work="$cache/build-$ver"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
log "building gvisor.dev/gvisor/runsc@$ver (static; about a minute on 2 cores)"
# GOFLAGS from the caller (-mod=mod for this repository) do not apply to a
# module-mode install of another module.
GOFLAGS= CGO_ENABLED=0 GOBIN="$work" go install -trimpath "gvisor.dev/gvisor/runsc@$ver" ||
	die "go install gvisor.dev/gvisor/runsc@$ver failed"
[ -x "$work/runsc" ] || die "no runsc produced"
go version -m "$work/runsc" | grep -q 'CGO_ENABLED=0' || die "runsc was not built with CGO_ENABLED=0"
"$work/runsc" --version >&2 || die "built runsc does not run"
mkdir -p "$out"
mv "$work/runsc" "$out/runsc.tmp"
mv "$out/runsc.tmp" "$out/runsc"
log "built $out/runsc in $(($(date +%s) - start)) s"
echo "$out/runsc"
