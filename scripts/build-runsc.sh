#!/usr/bin/env bash
# Builds the gVisor runsc that Airlock runs, from the gVisor Go module at the
# version pinned in internal/runtime/gvisor/runsc.version:
#   CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@<version>
# Static on purpose: a cgo build fails at sandbox start ("fork/exec
# /proc/self/exe: no such file or directory": no dynamic loader in gVisor's
# chroot). Cached per version under $AIRLOCK_RUNSC_CACHE (default
# /var/cache/airlock/runsc)/<version>/runsc, so it runs once per machine (about
# a minute on 2 cores); that is where `airlock serve` looks by default. Prints
# the path of the binary on its last line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib-go-install.sh
. scripts/lib-go-install.sh

ver=$(tr -d ' \n' <internal/runtime/gvisor/runsc.version)
[ -n "$ver" ] || { echo "build-runsc: empty internal/runtime/gvisor/runsc.version" >&2; exit 1; }
go_install_pinned runsc gvisor.dev/gvisor/runsc "$ver" "${AIRLOCK_RUNSC_CACHE:-/var/cache/airlock/runsc}"
