#!/usr/bin/env bash
# Builds the S3-compatible server the artifact tests run against: Versity S3
# Gateway (github.com/versity/versitygw, Apache-2.0) with its posix backend,
# at the version pinned in internal/artifacts/s3test/versitygw.version:
#   CGO_ENABLED=0 go install github.com/versity/versitygw/cmd/versitygw@<version>
# For tests only (scripts/test.sh's setup stage); `airlock serve` never needs
# it. Cached per version under $AIRLOCK_S3_SERVER_CACHE (default
# /var/cache/airlock/versitygw)/<version>/versitygw, where the tests look
# (internal/artifacts/s3test). About 1.5 minutes on 2 cores the first time.
# Prints the path of the binary on its last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '==> versitygw: %s\n' "$*" >&2; }
die() { printf 'build-s3-server: %s\n' "$*" >&2; exit 1; }

ver=$(tr -d ' \n' <internal/artifacts/s3test/versitygw.version)
[ -n "$ver" ] || die "empty internal/artifacts/s3test/versitygw.version"
cache="${AIRLOCK_S3_SERVER_CACHE:-/var/cache/airlock/versitygw}"
out="$cache/$ver"

if [ -x "$out/versitygw" ]; then
	log "cached $out/versitygw"
	echo "$out/versitygw"
	exit 0
fi
command -v go >/dev/null 2>&1 || die "go not found"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$out/versitygw" ]; then
	echo "$out/versitygw"
	exit 0
fi
work="$cache/build-$ver"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
log "building github.com/versity/versitygw/cmd/versitygw@$ver (static)"
# GOFLAGS from the caller (-mod=mod for this repository) do not apply to a
# module-mode install of another module.
GOFLAGS= CGO_ENABLED=0 GOBIN="$work" go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$ver" ||
	die "go install github.com/versity/versitygw/cmd/versitygw@$ver failed"
[ -x "$work/versitygw" ] || die "no versitygw produced"
"$work/versitygw" --version >&2 || die "built versitygw does not run"
mkdir -p "$out"
mv "$work/versitygw" "$out/versitygw.tmp"
mv "$out/versitygw.tmp" "$out/versitygw"
log "built $out/versitygw in $(($(date +%s) - start)) s"
echo "$out/versitygw"
