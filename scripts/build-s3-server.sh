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
# shellcheck source=scripts/lib-go-install.sh
. scripts/lib-go-install.sh

ver=$(tr -d ' \n' <internal/artifacts/s3test/versitygw.version)
[ -n "$ver" ] || { echo "build-s3-server: empty internal/artifacts/s3test/versitygw.version" >&2; exit 1; }
go_install_pinned versitygw github.com/versity/versitygw/cmd/versitygw "$ver" "${AIRLOCK_S3_SERVER_CACHE:-/var/cache/airlock/versitygw}"
